//! The switch protocol on one CPU: the tick, `schedule` (pick and make current),
//! `finish_switch` (the previous task's context is saved: it may run elsewhere, leave, or be
//! pushed), and yield.

use crate::locks::Locks;

use super::nohz_state::NOHZ;

use super::{CpuState, Move, Moved, RootDomain, Smp, Switch};
use crate::capacity::fits_capacity;
use crate::error::SchedError;
use crate::limits::ASYM_CAPACITY;
use crate::platform::{EventKind, Platform};
use crate::table::Location;
use crate::task::{TaskId, TaskState};

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: Locks, const G: usize>
    Smp<P, CPUS, TASKS, Q, R, G>
{
    /// The scheduler tick on `cpu`: charges the running task, updates PELT, preempts if due,
    /// then runs the periodic load balancer when it is due. Returns whether `cpu` should
    /// reschedule. A CPU out of range is [`SchedError::CpuOutOfRange`].
    pub fn tick(&self, cpu: usize, now: u64) -> Result<bool, SchedError> {
        self.check_cpu(cpu)?;
        // The groups' period timers run from the tick once a quota is set, before the tick
        // charges anything: a period that ended by `now` refills its pool first, as Linux's
        // timer does at the period's end, so the charge and the preemption check see the new
        // period's runtime (run after, a short period lost a tick of quota each time).
        #[cfg(feature = "groups")]
        if G > 0 && self.bandwidth_used.load(core::sync::atomic::Ordering::Relaxed) {
            // A broken reading (see `RunQueue::update_clock`) is no tick: taken, it would
            // push the timers past every later one.
            if !self.rq(cpu).rq.update_clock(now) {
                return Ok(false);
            }
            self.bandwidth_periods(now);
        }
        let (idle, resched) = {
            let mut st = self.rq(cpu);
            // (A broken reading also pushes the balancer's timer past every later one.)
            if !st.rq.update_clock(now) {
                return Ok(false);
            }
            st.fair(self.pool()).task_tick();
            self.after_update(cpu, &mut st);
            (st.rq.is_idle(), st.rq.need_resched())
        };
        let balanced = self.trigger_load_balance(cpu, now, idle);
        // Only a balance pass may have changed this runqueue since; then the reschedule
        // request is read again. (A remote CPU that asks for one meanwhile also sends the
        // reschedule IPI.)
        Ok(if balanced { self.rq(cpu).rq.need_resched() } else { resched })
    }

    /// Picks what `cpu` runs next and makes it current. `None`: run the idle loop, unless
    /// [`Smp::need_resched`] is set again after [`Smp::finish_switch`] (the running task was
    /// switched out for the active-balance stopper or a planned move, and tasks may still be
    /// queued): then call again. The previous task stays `on_cpu` until `finish_switch`. A CPU out of range is
    /// [`SchedError::CpuOutOfRange`].
    pub fn schedule(&self, cpu: usize, now: u64) -> Result<Option<TaskId>, SchedError> {
        self.check_cpu(cpu)?;
        Ok(self.schedule_on(cpu, now).next.map(|(id, _)| id))
    }

    /// [`Smp::schedule`], telling also which task was switched away from and the platform's
    /// payloads of both.
    pub fn schedule_switch(&self, cpu: usize, now: u64) -> Result<Switch<P::Payload>, SchedError> {
        self.check_cpu(cpu)?;
        Ok(self.schedule_on(cpu, now))
    }

    fn schedule_on(&self, cpu: usize, now: u64) -> Switch<P::Payload> {
        // A platform that did not call finish_switch after the previous switch has saved that
        // context by now (it is calling schedule again on this CPU): finish it in full, pushes
        // and the stopper included.
        let mut exited = None;
        let mut st = self.rq(cpu);
        // A broken reading (see `RunQueue::update_clock`), or one behind the clock, is taken as
        // the last sane one: it would mark the CPU idle since then and time the passes below
        // from there.
        let now = st.rq.sane_now(now);
        // The usual case keeps the lock: the last switch is finished, work is queued here,
        // and no idle balancer's kick waits (each of which needs other locks first).
        let switching_out = st.rq.switching_out_slot().is_some();
        let kicked = CPUS > 1 && NOHZ && self.nohz_kick_pending(cpu);
        let idle_now = !switching_out && self.goes_idle(&st);
        if switching_out || kicked || idle_now {
            drop(st);
            let mut idle_next = if switching_out {
                exited = self.finish_switch_on(cpu, now);
                self.goes_idle(&self.rq(cpu))
            } else {
                idle_now
            };
            // A kick to balance for the tickless idle CPUs is served first; it may pull work
            // here. (One CPU is never kicked: there is no other CPU to kick it.)
            if CPUS > 1 && NOHZ && self.nohz_idle_balance_on(cpu, now) {
                idle_next = self.goes_idle(&self.rq(cpu));
            }
            // A CPU about to idle first tries to pull work (newidle balance).
            if idle_next {
                self.newidle_balance(cpu, now);
            }
            st = self.rq(cpu);
        }
        st.rq.update_clock(now);
        // A runnable current task that must leave: a push is planned for it (exec, or an
        // affinity that no longer allows this CPU, which changes only together with its
        // push). One that blocked or exited just switches out as usual.
        let curr_pushed = st
            .rq
            .curr_slot()
            .is_some_and(|n| st.push_for(n).is_some() && st.rq.ent_in(self.pool(), n).on_rq());
        let (prev, next) = if st.active_balance || curr_pushed {
            // The stopper preempts everything: switch away from the running task so its
            // context is saved; the move (the balancer's, or the planned push of exec or an
            // affinity change) happens in finish_switch.
            let prev = st.fair(self.pool()).put_prev();
            if prev.is_some() {
                st.rq.switching_out = prev;
            }
            st.rq.need_resched = false;
            (prev, None)
        } else {
            st.fair(self.pool()).schedule_pick()
        };
        let ids = (prev.and_then(|n| st.rq.task_at(n)), next.and_then(|n| st.rq.task_at(n)));
        if next.is_none() && st.idle_stamp == 0 {
            st.idle_stamp = now.max(1);
        }
        let sw = self.record_switch(ids, prev != next, exited);
        self.after_update(cpu, &mut st);
        drop(st);
        if prev != next {
            let prev_state = sw.prev.map(|(_, state, _)| state);
            self.emit(now, cpu, EventKind::Switch { prev: ids.0, prev_state, next: ids.1 });
        }
        sw
    }

    /// The switch's bookkeeping under one table lock: prev (if it changes) leaves Running,
    /// next is Running, and both come with their payloads. `ids`: (prev, next).
    #[inline(always)]
    fn record_switch(
        &self,
        ids: (Option<TaskId>, Option<TaskId>),
        changes: bool,
        exited: Option<(TaskId, P::Payload)>,
    ) -> Switch<P::Payload> {
        let mut t = self.table();
        let mut prev_state = None;
        if let (Some(p), true) = (ids.0, changes) {
            if let Ok(e) = t.get_mut(p) {
                if e.state == TaskState::Running {
                    e.state = TaskState::Runnable;
                }
                prev_state = Some(e.state);
            }
        }
        if let Some(n) = ids.1 {
            if let Ok(e) = t.get_mut(n) {
                e.state = TaskState::Running;
            }
        }
        // (A task on a runqueue is always in the table; NONE only guards the lookup.)
        let payload = |id: TaskId| t.payload_or_none(id);
        Switch {
            prev: ids.0.zip(prev_state).map(|(id, s)| (id, s, payload(id))),
            next: ids.1.map(|id| (id, payload(id))),
            exited,
        }
    }

    /// Nothing to run: the CPU is about to idle. (Out of line on 32-bit targets: `schedule_on`
    /// asks up to three times, and each copy is a few hundred bytes of a small machine's image.)
    #[cfg_attr(target_pointer_width = "32", inline(never))]
    fn goes_idle(&self, st: &CpuState<Q, G>) -> bool {
        let curr_runnable = st.rq.curr_slot().is_some_and(|n| st.rq.ent_in(self.pool(), n).on_rq());
        st.rq.nr_queued() == 0 && !curr_runnable && !st.active_balance
    }

    /// `cpu` has saved the context of the task it switched away from: that task may now
    /// run elsewhere, and if it blocked or exited it leaves the runqueue. A task with a planned
    /// move (exec, affinity) goes into the slot reserved for it, and a pending active-balance
    /// push runs. A CPU out of range is [`SchedError::CpuOutOfRange`].
    ///
    /// Returns the task that exited with this switch (it was switched away from in state
    /// `Exiting`, or its exit came between `schedule` and now) with its payload: it is gone,
    /// and its thread can be freed.
    pub fn finish_switch(&self, cpu: usize, now: u64) -> Result<Option<(TaskId, P::Payload)>, SchedError> {
        self.check_cpu(cpu)?;
        Ok(self.finish_switch_on(cpu, now))
    }

    fn finish_switch_on(&self, cpu: usize, now: u64) -> Option<(TaskId, P::Payload)> {
        let mut st = self.rq(cpu);
        let now = st.rq.sane_now(now);
        let prev = st.rq.switching_out_slot();
        let exited = self.finish_switch_locked(cpu, &mut st);
        // One CPU plans no pushes (placement has no other CPU to choose), and every affinity
        // includes it: nothing below can apply. On more CPUs nearly every switch has neither
        // a push planned nor the stopper to run, and returns here too, without moving an
        // absent push through the stack (a load the stores before it cannot forward).
        if CPUS == 1 || (!st.pushes_planned() && !st.active_balance) {
            return exited;
        }
        // The task switched away from may have a slot waiting elsewhere (exec, affinity):
        // still queued here, it leaves now that its context is saved. (A running task's mask
        // excludes its CPU only while such a push is planned: the push decides, not the mask.)
        let planned = prev.and_then(|p| st.take_push(p));
        let leaves = planned.filter(|p| {
            st.rq.task_at(p.slot) == Some(p.task)
                && st.rq.entity_in(self.pool(), p.slot).is_some_and(|e| e.on_rq())
        });
        let push = st.active_balance;
        if leaves.is_some() {
            st.rq.resched_curr();
            self.after_update(cpu, &mut st);
        }
        drop(st);
        if let Some(p) = planned {
            // (A push planned for a task that blocked or exited meanwhile is not needed.)
            let moved = leaves.is_some()
                && self.move_queued_task(cpu, p.task, p.slot, p.dst as usize, Move::Reserved, now, p.reason)
                    == Moved::Yes;
            if !moved {
                self.unreserve(p.dst as usize);
            }
        }
        // (Only the balancer of a machine of several CPUs asks for the stopper.)
        if CPUS > 1 && push {
            self.active_balance_stop(cpu, now);
        }
        exited
    }

    /// Completes the switch away from the task `cpu` was switching out; returns it with its
    /// payload if it exited (it leaves the table here).
    fn finish_switch_locked(&self, cpu: usize, st: &mut CpuState<Q, G>) -> Option<(TaskId, P::Payload)> {
        let id = st.fair(self.pool()).finish_switch()?;
        let mut t = self.table();
        let state = t.get(id).map(|x| x.state).ok();
        let mut exited = None;
        if state == Some(TaskState::Exiting) {
            if let Some(e) = self.pool().cell(id) {
                st.remove_task_load(self.pool(), e);
                self.task_gone(e);
            }
            exited = Some((id, t.payload_or_none(id)));
            let _ = t.remove(id);
        } else if let Ok(te) = t.get_mut(id) {
            te.location = Location::Parked { cpu: cpu as u16 };
        }
        drop(t);
        self.after_update(cpu, st);
        exited
    }

    /// The task running on `cpu` yields once (nothing happens when none runs). A CPU out
    /// of range is [`SchedError::CpuOutOfRange`].
    pub fn yield_now(&self, cpu: usize, now: u64) -> Result<(), SchedError> {
        self.check_cpu(cpu)?;
        let mut st = self.rq(cpu);
        if st.rq.curr_slot().is_some() {
            st.rq.update_clock(now);
            st.fair(self.pool()).yield_curr();
            st.rq.resched_curr();
            self.after_update(cpu, &mut st);
        }
        Ok(())
    }
}

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: Locks, const G: usize>
    Smp<P, CPUS, TASKS, Q, R, G>
{
    /// A task leaves the machine: its group counts it out (the `groups` feature).
    #[inline(always)]
    pub(super) fn task_gone(&self, e: &crate::entities::EntityCell) {
        #[cfg(feature = "groups")]
        self.count_out(e.group());
        #[cfg(not(feature = "groups"))]
        let _ = e;
    }

    /// After an operation on `cpu`'s runqueue: publish its figures and pass on a reschedule
    /// request.
    pub(crate) fn after_update(&self, cpu: usize, st: &mut CpuState<Q, G>) {
        self.update_misfit_status(st);
        self.cpus[cpu].stats.publish(st);
        #[cfg(all(any(feature = "internals", test), target_pointer_width = "64"))]
        if self.prefetch_hints.load(portable_atomic::Ordering::Relaxed) {
            self.cpus[cpu].stats.publish_first_queued(&st.rq);
        }
        if st.rq.nr_running() >= 2 {
            RootDomain::set(&self.root.overload, true);
        }
        if st.rq.need_resched() {
            self.platform.resched_cpu(cpu);
        }
    }

    /// `update_misfit_status`: on an asymmetric machine, the running task is misfit when it
    /// does not fit this CPU's capacity; its misfit load is the load it would take along,
    /// `task_h_load` (with groups, the part of the CPU's load its hierarchy gives it).
    pub(super) fn update_misfit_status(&self, st: &mut CpuState<Q, G>) {
        // (One CPU, or a build without `asym-capacity`, has no asymmetric domain:
        // `asym_capacity` is false, and these constants let the compiler see it.)
        st.misfit_task_load = match (CPUS > 1 && ASYM_CAPACITY && st.asym_capacity, st.rq.curr_slot()) {
            (true, Some(n)) => {
                let e = st.rq.ent_in(self.pool(), n);
                if e.on_rq() && !fits_capacity(e.util_est(), st.rq.capacity()) {
                    st.fair(self.pool()).task_h_load(n).max(1)
                } else {
                    0
                }
            }
            _ => 0,
        };
    }
}
