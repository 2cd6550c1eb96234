//! The task life cycle: create, block, exit, exec, and changes of nice and affinity (the
//! wakeup is `wakeup.rs`).
//! Every call validates its input before it changes anything.

use crate::locks::Locks;

use super::{update_avg, Moved, Push, Smp};
use crate::cpumask::CpuMask;
use crate::error::SchedError;
use crate::fair::{DequeueFlags, EnqueueFlags, WakeFlags};
use crate::placement::{SelectFor, Waker};
use crate::platform::{EventKind, MigrateReason, Platform, TaskPayload};
use crate::runqueue::SlotId;
use crate::table::{Location, TaskEntry};
use crate::task::{Entity, TaskId, TaskParams, TaskState};
use crate::weights::Nice;

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: Locks, const G: usize>
    Smp<P, CPUS, TASKS, Q, R, G>
{
    /// Creates a task on behalf of the task running on `cpu` (its parent), places it and
    /// makes it runnable. Returns its id. Its payload is [`TaskPayload::NONE`]; see
    /// [`Smp::create_with`].
    pub fn create(&self, cpu: usize, now: u64, params: TaskParams) -> Result<TaskId, SchedError> {
        self.create_with(cpu, now, params, P::Payload::NONE)
    }

    /// [`Smp::create`] with the platform's payload for the task (its thread), stored before
    /// any CPU can pick the task and handed back by [`Smp::schedule_switch`].
    pub fn create_with(
        &self,
        cpu: usize,
        now: u64,
        params: TaskParams,
        payload: P::Payload,
    ) -> Result<TaskId, SchedError> {
        self.check_cpu(cpu)?;
        let nice = Nice::new(params.nice)?;
        self.check_affinity(&params.affinity)?;
        let affinity = params.affinity.and(&self.online());
        // Choose the CPU and check for room before changing anything, so a refused
        // creation leaves every table and runqueue as it was.
        let mut template = Entity::new(nice, params.policy, affinity, cpu as u32);
        let (target, _) =
            self.select_cpu(cpu, &mut template, SelectFor::Fork, WakeFlags::FORK, Waker::default());
        // Placement may pick a full runqueue; then the parent's CPU or any allowed one with room.
        // The slot is reserved now, so the task cannot find it taken when it lands.
        let target = self.reserve_room(target, cpu, &affinity).ok_or(SchedError::RunQueueFull)?;
        let entry =
            TaskEntry { state: TaskState::Waking, location: Location::InTransit { from: cpu as u16 } };
        let inserted = self.table().insert(entry, payload);
        let id = match inserted {
            Ok(id) => id,
            Err(e) => {
                self.unreserve(target);
                return Err(e);
            }
        };
        let mut child = template;
        {
            // task_fork_fair on the parent's runqueue; the vruntime comes back normalised.
            let mut st = self.rq(cpu);
            st.rq.update_clock(now);
            st.fair(self.pool()).fork_vruntime(&mut child);
            // The child is in its parent's group (counted while the parent, on this
            // runqueue, keeps the group alive).
            #[cfg(feature = "groups")]
            self.count_forked(child.group);
            self.after_update(cpu, &mut st);
        }
        #[cfg(feature = "groups")]
        let group = child.group;
        // In transit: this call owns the new task's cell.
        self.pool().put(id, child);
        match self.activate_on(target, now, id, EnqueueFlags::INITIAL, WakeFlags::FORK, true) {
            Ok(_) => {
                self.emit(now, target, EventKind::NewTask { task: id });
                Ok(id)
            }
            Err(err) => {
                // Cannot happen (the slot was reserved); undo rather than lose track, the
                // group's count of the child included.
                self.unreserve(target);
                #[cfg(feature = "groups")]
                self.count_out(group);
                let _ = self.table().remove(id);
                Err(err)
            }
        }
    }

    /// Puts a task in transit (its entity in the pool) onto `cpu`'s runqueue (new task or
    /// wakeup), into the slot reserved for it with [`Smp::reserve_room`], and checks
    /// preemption.
    pub(super) fn activate_on(
        &self,
        cpu: usize,
        now: u64,
        id: TaskId,
        flags: EnqueueFlags,
        wf: WakeFlags,
        new_task: bool,
    ) -> Result<SlotId, SchedError> {
        let mut st = self.rq(cpu);
        st.rq.update_clock(now);
        let slot = st.fair(self.pool()).insert_reserved(id).ok_or(SchedError::RunQueueFull)?;
        if new_task {
            st.fair(self.pool()).post_init_entity(slot);
        }
        st.fair(self.pool()).enqueue(slot, flags);
        // Land it in the table before this runqueue's lock is released: from then on the
        // CPU may pick it, and picking sets its state to Running.
        if let Ok(te) = self.table().get_mut(id) {
            te.state = TaskState::Runnable;
            te.location = Location::OnCpu { cpu: cpu as u16, slot: slot as u16 };
        }
        st.fair(self.pool()).check_preempt_wakeup(slot, wf);
        // Wakeup of an idle CPU: learn how long it idled (avg_idle), for newidle gating.
        // (The clock, not `now`: a broken reading is not an idle time.)
        if st.idle_stamp != 0 {
            let delta = st.rq.clock().saturating_sub(st.idle_stamp);
            let max = 2 * st.max_idle_balance_cost;
            st.avg_idle = update_avg(st.avg_idle, delta).min(max);
            st.idle_stamp = 0;
        }
        self.after_update(cpu, &mut st);
        Ok(slot)
    }

    /// The task running on `cpu` blocks. It keeps the CPU until `schedule`.
    pub fn block(&self, cpu: usize, now: u64, id: TaskId) -> Result<(), SchedError> {
        self.check_cpu(cpu)?;
        let mut st = self.rq(cpu);
        let mut t = self.table();
        let entry = *t.get(id)?;
        let slot = match (entry.state, entry.location) {
            (TaskState::Running, Location::OnCpu { cpu: c, slot }) if c as usize == cpu => slot,
            (state, _) => return Err(SchedError::InvalidState { task: id, state }),
        };
        st.rq.update_clock(now);
        st.fair(self.pool()).dequeue(slot as u32, DequeueFlags::SLEEP);
        if let Ok(e) = t.get_mut(id) {
            e.state = TaskState::Blocked;
        }
        drop(t);
        st.rq.resched_curr();
        self.after_update(cpu, &mut st);
        Ok(())
    }

    /// A task exits: the task running on its CPU keeps it until `schedule`; any other
    /// task is gone at once. Its id becomes stale.
    pub fn exit(&self, now: u64, id: TaskId) -> Result<(), SchedError> {
        self.exit_now(now, id).map(|_| ())
    }

    /// [`Smp::exit`], telling whether the task is gone at once (`true`) or leaves with the
    /// switch that finishes it on its CPU (`false`: [`Smp::finish_switch`] reports it).
    pub(crate) fn exit_now(&self, now: u64, id: TaskId) -> Result<bool, SchedError> {
        self.initialised()?;
        loop {
            let entry = *self.table().get(id)?;
            match (entry.state, entry.location) {
                (TaskState::Exiting, _) => {
                    return Err(SchedError::InvalidState { task: id, state: entry.state })
                }
                (_, Location::InTransit { .. }) => core::hint::spin_loop(),
                (_, Location::Parked { cpu }) => {
                    let mut st = self.rq(cpu as usize);
                    let mut t = self.table();
                    if t.get(id).copied() != Ok(entry) {
                        continue;
                    }
                    if let Some(e) = self.pool().cell(id) {
                        st.remove_task_load(self.pool(), e);
                        self.task_gone(e);
                    }
                    t.remove(id)?;
                    drop(t);
                    self.after_update(cpu as usize, &mut st);
                    drop(st);
                    self.emit(now, cpu as usize, EventKind::Exit { task: id });
                    return Ok(true);
                }
                (_, Location::OnCpu { cpu, slot }) => {
                    let c = cpu as usize;
                    let mut st = self.rq(c);
                    let mut t = self.table();
                    if t.get(id).copied() != Ok(entry) {
                        continue;
                    }
                    st.rq.update_clock(now);
                    st.fair(self.pool()).dequeue(slot as u32, DequeueFlags::SLEEP);
                    let busy = st.rq.curr_slot() == Some(slot as u32)
                        || st.rq.switching_out_slot() == Some(slot as u32);
                    if busy {
                        // Its CPU still runs it or is switching away: it leaves at finish_switch.
                        if let Ok(e) = t.get_mut(id) {
                            e.state = TaskState::Exiting;
                        }
                        st.rq.resched_curr();
                    } else {
                        if let Some(e) = st.rq.take(slot as u32).and_then(|t| self.pool().cell(t)) {
                            st.remove_task_load(self.pool(), e);
                            self.task_gone(e);
                        }
                        t.remove(id)?;
                    }
                    drop(t);
                    self.after_update(c, &mut st);
                    drop(st);
                    self.emit(now, cpu as usize, EventKind::Exit { task: id });
                    return Ok(!busy);
                }
            }
        }
    }

    /// The task running on `cpu` replaces its program (`sched_exec`): exec balancing may
    /// choose another CPU for it (the slow path over BALANCE_EXEC domains); if that CPU has
    /// room, a slot is reserved there and the task is switched out and moved there once its
    /// context is saved, else it stays. A task already leaving (its affinity changed) runs
    /// where it goes. Returns the CPU it will run on.
    pub fn exec(&self, cpu: usize, now: u64, id: TaskId) -> Result<usize, SchedError> {
        self.check_cpu(cpu)?;
        let (slot, mut e) = {
            let st = self.rq(cpu);
            match st.rq.curr_slot().and_then(|n| st.rq.entity_in(self.pool(), n).map(|e| (n, e.get()))) {
                Some((n, e)) if st.rq.task_at(n) == Some(id) && e.on_rq => match st.push_for(n) {
                    // Already leaving (its affinity changed): it runs where it goes.
                    Some(p) if p.task == id => return Ok(p.dst as usize),
                    _ => (n, e),
                },
                _ => {
                    let state = self.state(id)?;
                    return Err(SchedError::InvalidState { task: id, state });
                }
            }
        };
        let (dest, _) = self.select_cpu(cpu, &mut e, SelectFor::Exec, WakeFlags::empty(), Waker::default());
        if dest == cpu {
            return Ok(cpu);
        }
        // A slot waits for it there; if that CPU has none, it stays (exec balancing is only an
        // optimisation, and no other CPU was chosen).
        if !self.rq(dest).rq.reserve() {
            return Ok(cpu);
        }
        let dst = dest;
        let push = Push { slot, task: id, dst: dst as u32, reason: MigrateReason::Placement };
        if self.arm_push(cpu, now, push, None) {
            Ok(dst)
        } else {
            self.unreserve(dst);
            // (A push `set_affinity` planned meanwhile says where it goes.)
            let st = self.rq(cpu);
            Ok(st.push_for(slot).filter(|p| p.task == id).map_or(cpu, |p| p.dst as usize))
        }
    }

    /// Records that the task in `p.slot` (still on `cpu`: current, or being switched away
    /// from) leaves for `p.dst`, where a slot was reserved for it, once its context is saved;
    /// with `affinity`, its new mask is set in the same step. `false` if the task is no
    /// longer there, or (exec's push, without `affinity`) a push is already planned for it or
    /// its mask no longer allows `p.dst`: the caller gives the reservation back.
    fn arm_push(&self, cpu: usize, now: u64, p: Push, affinity: Option<CpuMask>) -> bool {
        let mut st = self.rq(cpu);
        let here = st.rq.task_at(p.slot) == Some(p.task);
        let Some(e) = st.fair(self.pool()).entity(p.slot).filter(|e| here && e.on_cpu()) else {
            return false;
        };
        // Exec's push (no new mask) never replaces a planned one, and goes only where the mask
        // allows: its move is an optimisation, chosen from a mask that may have changed since.
        if affinity.is_none() && (st.push_for(p.slot).is_some() || !e.allows(p.dst as usize)) {
            return false;
        }
        let replaced = match st.set_push(p) {
            Ok(old) => old,
            Err(_) => return false,
        };
        // Only with its push planned may a running task's mask exclude its CPU: `schedule`
        // and `finish_switch` look at the push, not at the mask.
        if let Some(mask) = affinity {
            e.set_affinity(mask);
        }
        st.rq.update_clock(now);
        if st.rq.curr_slot() == Some(p.slot) {
            st.rq.resched_curr();
        }
        self.after_update(cpu, &mut st);
        drop(st);
        if let Some(old) = replaced {
            self.unreserve(old.dst as usize);
        }
        true
    }

    /// Changes a task's nice value, wherever it is.
    pub fn set_nice(&self, now: u64, id: TaskId, nice: i32) -> Result<(), SchedError> {
        self.initialised()?;
        let nice = Nice::new(nice)?;
        loop {
            let entry = *self.table().get(id)?;
            match entry.location {
                Location::InTransit { .. } => core::hint::spin_loop(),
                Location::Parked { cpu, .. } => {
                    let mut st = self.rq(cpu as usize);
                    let mut t = self.table();
                    let Ok(te) = t.get_mut(id) else { continue };
                    // It may have woken and slept again elsewhere since the first look: only
                    // the runqueue it sleeps on may be adjusted.
                    let Location::Parked { cpu: now_on } = te.location else { continue };
                    if now_on != cpu {
                        continue;
                    }
                    st.rq.update_clock(now);
                    let pool = self.pool();
                    pool.modify(id, |e| st.reweight_parked(pool, e, nice));
                    return Ok(());
                }
                Location::OnCpu { cpu, slot } => {
                    let c = cpu as usize;
                    let Some(mut st) = self.lock_placed(id, entry.location, c) else { continue };
                    st.rq.update_clock(now);
                    st.fair(self.pool()).change_nice(slot as u32, nice);
                    self.after_update(c, &mut st);
                    return Ok(());
                }
            }
        }
    }

    /// Sets a task's EEVDF slice (its request size, Linux's `sched_attr.sched_runtime`), in
    /// ns within 0.1–100 ms ([`crate::eevdf::MIN_SLICE_NS`], [`crate::eevdf::MAX_SLICE_NS`]);
    /// 0 returns it to the machine's default. It takes effect with the task's next request.
    /// Out of range is [`SchedError::InvalidSlice`] and nothing changes.
    ///
    /// ```
    /// # use sched_core::{Smp, NoPlatform, Features, TaskParams, SchedError};
    /// let m: Box<Smp<NoPlatform, 1, 4, 4>> = Box::new(Smp::new(NoPlatform, Features::default(), 250));
    /// m.init_with(|t| t.init_flat(1)).unwrap();
    /// let t = m.create(0, 0, TaskParams::default()).unwrap();
    /// assert_eq!(m.set_slice(0, t, 1_000_000), Ok(()));
    /// assert_eq!(m.set_slice(0, t, 50_000), Err(SchedError::InvalidSlice(50_000)));
    /// ```
    #[cfg(feature = "eevdf")]
    pub fn set_slice(&self, now: u64, id: TaskId, ns: u64) -> Result<(), SchedError> {
        self.initialised()?;
        if ns != 0 && crate::eevdf::checked_slice_ns(ns).is_none() {
            return Err(SchedError::InvalidSlice(ns));
        }
        loop {
            let entry = *self.table().get(id)?;
            match entry.location {
                Location::InTransit { .. } => core::hint::spin_loop(),
                Location::Parked { .. } => {
                    // The default slice (every CPU has the same tunables), read before the
                    // table lock, which is never held while taking a runqueue lock.
                    let (default, tick) = (self.rq(0).rq.tunables.min_granularity_ns, self.tick_ns());
                    // A parked task's entity belongs to whoever holds the table lock.
                    let mut t = self.table();
                    match t.get_mut(id) {
                        Ok(te) if matches!(te.location, Location::Parked { .. }) => {}
                        _ => continue,
                    }
                    self.pool().modify(id, |e| {
                        e.slice = ns;
                        // The lag it keeps is bounded by its slice: by the new one from now.
                        e.clamp_kept_lag(default, tick);
                    });
                    return Ok(());
                }
                Location::OnCpu { cpu, .. } => {
                    let c = cpu as usize;
                    let Some(mut st) = self.lock_placed(id, entry.location, c) else { continue };
                    st.rq.update_clock(now);
                    let (default, tick) = (st.rq.tunables.min_granularity_ns, st.rq.tick_ns);
                    self.pool().modify(id, |e| {
                        e.slice = ns;
                        // A task that blocked here and is still being switched out keeps
                        // the lag it left with: bounded by the new slice too.
                        e.clamp_kept_lag(default, tick);
                    });
                    self.after_update(c, &mut st);
                    return Ok(());
                }
            }
        }
    }

    /// Changes a task's allowed CPUs. A queued task on a CPU it may no longer use moves at
    /// once; a running one is preempted and moves when its CPU has switched away from it,
    /// into a slot reserved for it now. When no allowed CPU has room for it, the call is
    /// refused with [`SchedError::RunQueueFull`] and nothing changes (but, for a running task,
    /// the LLC's average scan cost its choice of a CPU observed, as a refused wakeup's does).
    pub fn set_affinity(&self, now: u64, id: TaskId, mask: CpuMask) -> Result<(), SchedError> {
        self.check_affinity(&mask)?;
        let mask = mask.and(&self.online());
        loop {
            let entry = *self.table().get(id)?;
            match entry.location {
                Location::InTransit { .. } => core::hint::spin_loop(),
                Location::Parked { .. } => {
                    let mut t = self.table();
                    let Ok(te) = t.get_mut(id) else { continue };
                    let Location::Parked { .. } = te.location else { continue };
                    if let Some(e) = self.pool().cell(id) {
                        e.set_affinity(mask);
                    }
                    return Ok(());
                }
                Location::OnCpu { cpu, slot } => {
                    if let Some(done) = self.reaffine_placed(now, id, &entry, cpu as usize, slot as u32, mask)
                    {
                        return done;
                    }
                }
            }
        }
    }

    /// `set_affinity` of a task the table places in slot `slot` of CPU `c` (`entry`): the
    /// mask alone changes if it may stay (or is exiting, or is already planned to move where
    /// the mask allows); a running task is preempted and pushed once switched out, into a
    /// slot reserved now; a queued one moves at once. `None`: its place changed since
    /// `entry` was read; read it again.
    fn reaffine_placed(
        &self,
        now: u64,
        id: TaskId,
        entry: &TaskEntry,
        c: usize,
        slot: u32,
        mask: CpuMask,
    ) -> Option<Result<(), SchedError>> {
        let (e, planned) = {
            let st = self.lock_placed(id, entry.location, c)?;
            let e = st.rq.entity_in(self.pool(), slot).map(|e| e.get())?;
            (e, st.push_for(slot))
        };
        // An exiting task never runs again, a planned move to a CPU the new mask allows still
        // fits, and a task the mask lets stay stays: only the mask changes.
        let stays = mask.contains(c);
        let keep = |planned: Option<Push>| {
            entry.state == TaskState::Exiting
                || planned.is_some_and(|p| p.task == id && mask.contains(p.dst as usize))
        };
        if stays || keep(planned) {
            let mut st = self.lock_placed(id, entry.location, c)?;
            // A mask that excludes this CPU may only be set while the push read above still
            // fits (another call may have cancelled or replaced it since): else read again.
            if !stays && !keep(st.push_for(slot)) {
                return None;
            }
            let e = st.fair(self.pool()).entity(slot)?;
            e.set_affinity(mask);
            // Staying here, a push planned for it is no longer needed.
            let cancelled = if stays { st.take_push(slot) } else { None };
            drop(st);
            if let Some(p) = cancelled {
                self.unreserve(p.dst as usize);
            }
            return Some(Ok(()));
        }
        if e.on_cpu {
            // Running here (or being switched away from): it leaves once its context is
            // saved, into a slot reserved now.
            let mut probe = Entity { affinity: mask, ..e };
            let wake = SelectFor::Wake(c as u32);
            let (choice, _) = self.select_cpu(c, &mut probe, wake, WakeFlags::empty(), Waker::default());
            let Some(dst) = self.reserve_room(choice, choice, &mask) else {
                return Some(Err(SchedError::RunQueueFull));
            };
            let push = Push { slot, task: id, dst: dst as u32, reason: MigrateReason::Affinity };
            if self.arm_push(c, now, push, Some(mask)) {
                return Some(Ok(()));
            }
            self.unreserve(dst);
            return None;
        }
        if !e.on_rq {
            core::hint::spin_loop();
            return None;
        }
        // Queued here: it moves now, its new mask set in the same step.
        let first = mask.first().unwrap_or(c);
        match self.move_to_room(c, id, slot, first, mask, now) {
            Moved::Yes => Some(Ok(())),
            Moved::NoRoom => Some(Err(SchedError::RunQueueFull)),
            Moved::Changed => None,
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::boxed::Box;

    use super::*;
    use crate::{Features, NoPlatform};

    const NOW: u64 = 1_000_000_000;

    type M = Smp<NoPlatform, 4, 8, 8>;

    fn mask(cpus: &[usize]) -> CpuMask {
        cpus.iter().copied().collect()
    }

    /// Four flat CPUs, one task allowed `allowed`, running on CPU 0.
    fn running_on_0(allowed: &[usize]) -> (Box<M>, TaskId) {
        let m: Box<M> = Box::new(Smp::new(NoPlatform, Features::default(), 250));
        m.init_with(|t| t.init_flat(4)).unwrap();
        let t = m.create(0, NOW, TaskParams { affinity: mask(allowed), ..TaskParams::default() }).unwrap();
        assert_eq!(m.schedule(0, NOW).unwrap(), Some(t));
        m.finish_switch(0, NOW).unwrap();
        (m, t)
    }

    /// A task may run on a CPU its affinity excludes only while its push is planned (the
    /// switch path moves it by the push alone): `set_affinity` plans the push with the mask
    /// and `finish_switch` carries it out; a mask changed with no push is reported.
    #[test]
    fn a_running_task_outside_its_affinity_needs_a_planned_push() {
        let (m, t) = running_on_0(&[0]);
        m.set_affinity(NOW, t, mask(&[1])).unwrap();
        m.check_invariants().unwrap();
        assert_eq!(m.schedule(0, NOW + 1).unwrap(), None);
        m.finish_switch(0, NOW + 1).unwrap();
        assert_eq!(m.task_cpu(t), Ok(1));
        m.check_invariants().unwrap();

        assert_eq!(m.schedule(1, NOW + 2).unwrap(), Some(t));
        m.finish_switch(1, NOW + 2).unwrap();
        m.pool().cell(t).unwrap().set_affinity(mask(&[0]));
        let v = m.check_invariants().unwrap_err();
        assert_eq!((v.cpu, v.task), (1, Some(t)));
        assert_eq!(v.what, "running task outside its affinity with no push planned");
    }

    /// Exec's push, chosen from a mask read earlier, neither replaces a push planned since
    /// (an affinity change's) nor goes where the task's mask now excludes: either would leave
    /// the task on a CPU its affinity excludes once the move fails.
    #[test]
    fn exec_s_push_keeps_a_planned_push_and_the_mask() {
        let (m, t) = running_on_0(&[0, 1]);
        let slot = m.rq(0).rq.curr_slot().unwrap();
        let exec_to = |dst: usize| Push { slot, task: t, dst: dst as u32, reason: MigrateReason::Placement };

        assert!(!m.arm_push(0, NOW, exec_to(2), None), "CPU 2 is outside the mask");
        assert_eq!(m.rq(0).push_for(slot), None);

        m.set_affinity(NOW, t, mask(&[1])).unwrap();
        let planned = m.rq(0).push_for(slot).unwrap();
        assert_eq!(planned.dst, 1);
        assert!(!m.arm_push(0, NOW, exec_to(1), None), "a push is planned already");
        assert_eq!(m.rq(0).push_for(slot), Some(planned));
        m.check_invariants().unwrap();
    }
}
