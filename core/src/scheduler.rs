//! The fair scheduler of one CPU: the API a platform drives (create, exit, block, wake,
//! tick, schedule, yield, nice and affinity changes), with validation and typed errors.
//!
//! Every call validates all of its input before it changes anything, so an error leaves
//! the scheduler exactly as it was.

use crate::cpumask::CpuMask;
use crate::error::SchedError;
use crate::fair::{DequeueFlags, EnqueueFlags, WakeFlags};
use crate::features::{Features, Tunables};
use crate::platform::{Event, EventKind, Platform};
use crate::runqueue::{InvariantViolation, NodeId, RunQueue};
use crate::table::{Location, TaskEntry, TaskTable};
use crate::task::{Entity, TaskId, TaskParams, TaskState};
use crate::weights::Nice;

/// One CPU's fair scheduler with room for `TASKS` live tasks, of which up to `Q` can be
/// runnable at once.
///
/// ```
/// use sched_core::{NoPlatform, Scheduler, TaskParams, Tunables, Features};
/// let mut s: Scheduler<NoPlatform, 16, 16> =
///     Scheduler::new(NoPlatform, 0, 1024, Tunables::for_cpus(1), Features::default());
/// let a = s.create(0, TaskParams::default()).unwrap();
/// let b = s.create(0, TaskParams::default()).unwrap();
/// // START_DEBIT: `a` was placed one 6 ms vslice after min_vruntime, `b` (sharing the
/// // period with `a`) only 3 ms after, so `b` is leftmost.
/// assert_eq!(s.schedule(0), Some(b));
/// // Tick every 1 ms; `b`'s slice is half the 6 ms latency.
/// let mut now = 0;
/// while !s.tick(now) { now += 1_000_000; }
/// // Fixed-point rounding makes the slice 2_999_999 ns, so the 3 ms tick preempts.
/// assert_eq!(now, 3_000_000);
/// assert_eq!(s.schedule(now), Some(a));
/// ```
pub struct Scheduler<P: Platform, const TASKS: usize, const Q: usize> {
    platform: P,
    table: TaskTable<TASKS>,
    rq: RunQueue<Q>,
    last_min_vruntime: u64,
}

impl<P: Platform, const TASKS: usize, const Q: usize> Scheduler<P, TASKS, Q> {
    /// A scheduler for CPU `cpu` of original capacity `capacity_orig` (1024 for a big CPU).
    pub fn new(platform: P, cpu: u32, capacity_orig: u64, tunables: Tunables, features: Features) -> Self {
        let rq = RunQueue::new(cpu, capacity_orig, tunables, features);
        let last_min_vruntime = rq.min_vruntime();
        Scheduler { platform, table: TaskTable::new(), rq, last_min_vruntime }
    }

    /// The platform.
    pub fn platform(&self) -> &P {
        &self.platform
    }

    /// The runqueue (read-only).
    pub fn rq(&self) -> &RunQueue<Q> {
        &self.rq
    }

    /// The live tasks.
    pub fn tasks(&self) -> &TaskTable<TASKS> {
        &self.table
    }

    /// Changes features and tunables at run time.
    pub fn configure(&mut self, tunables: Tunables, features: Features) {
        self.rq.configure(tunables, features);
    }

    /// The task running now, if any.
    pub fn current(&self) -> Option<TaskId> {
        self.rq.curr_id()
    }

    /// Whether the platform should call [`Scheduler::schedule`].
    pub fn need_resched(&self) -> bool {
        self.rq.need_resched()
    }

    /// A task's state.
    pub fn state(&self, id: TaskId) -> Result<TaskState, SchedError> {
        Ok(self.table.get(id)?.state)
    }

    /// A copy of a task's entity, wherever it is.
    pub fn entity(&self, id: TaskId) -> Result<Entity, SchedError> {
        match self.table.get(id)?.location {
            Location::Parked { entity, .. } => Ok(entity),
            Location::OnCpu { node, .. } => self.rq.entity(node).copied().ok_or(SchedError::UnknownTask(id)),
        }
    }

    fn emit(&self, now: u64, kind: EventKind) {
        self.platform.event(&Event { time: now, cpu: self.rq.cpu(), kind });
    }

    fn resched_if_needed(&self) {
        if self.rq.need_resched() {
            self.platform.resched_cpu(self.rq.cpu());
        }
    }

    fn check_affinity(&self, mask: &CpuMask) -> Result<(), SchedError> {
        if mask.is_empty() {
            return Err(SchedError::EmptyAffinity);
        }
        if !mask.contains(self.rq.cpu() as usize) {
            return Err(SchedError::AffinityNotOnline);
        }
        Ok(())
    }

    fn node_of(&self, id: TaskId) -> Result<NodeId, SchedError> {
        match self.table.get(id)?.location {
            Location::OnCpu { node, .. } => Ok(node),
            Location::Parked { .. } => Err(SchedError::InvalidState { task: id, state: TaskState::Blocked }),
        }
    }

    /// Creates a task and makes it runnable (fork + wake_up_new_task). The creating
    /// context is the current task, whose vruntime the child inherits.
    pub fn create(&mut self, now: u64, params: TaskParams) -> Result<TaskId, SchedError> {
        let nice = Nice::new(params.nice)?;
        self.check_affinity(&params.affinity)?;
        let id = self.table.peek_next_id().ok_or(SchedError::TaskTableFull)?;
        if !self.rq.has_room() {
            return Err(SchedError::RunQueueFull);
        }
        self.rq.update_clock(now);
        let mut child = Entity::new(id, nice, params.policy, params.affinity, self.rq.cpu());
        self.rq.fork_vruntime(&mut child);
        let node = self.rq.insert(child).ok_or(SchedError::RunQueueFull)?;
        let entry =
            TaskEntry { state: TaskState::Runnable, location: Location::OnCpu { cpu: self.rq.cpu(), node } };
        let got = self.table.insert(entry)?;
        debug_assert_eq!(got, id);
        self.rq.post_init_entity(node);
        self.rq.enqueue(node, EnqueueFlags::empty());
        self.rq.check_preempt_wakeup(node, WakeFlags::FORK);
        self.emit(now, EventKind::NewTask { task: id });
        self.resched_if_needed();
        Ok(id)
    }

    /// The current task blocks (sleeps). It keeps the CPU until the platform calls
    /// [`Scheduler::schedule`], which this requests.
    pub fn block(&mut self, now: u64, id: TaskId) -> Result<(), SchedError> {
        let entry = *self.table.get(id)?;
        if entry.state != TaskState::Running {
            return Err(SchedError::InvalidState { task: id, state: entry.state });
        }
        let node = self.node_of(id)?;
        self.rq.update_clock(now);
        self.rq.dequeue(node, DequeueFlags::SLEEP);
        self.table.get_mut(id)?.state = TaskState::Blocked;
        self.rq.resched_curr();
        self.resched_if_needed();
        Ok(())
    }

    /// Wakes a blocked task. Returns whether the running task should be preempted.
    pub fn wake(&mut self, now: u64, id: TaskId) -> Result<bool, SchedError> {
        self.wake_with(now, id, WakeFlags::empty())
    }

    /// Wakes a blocked task with wakeup hints.
    pub fn wake_with(&mut self, now: u64, id: TaskId, flags: WakeFlags) -> Result<bool, SchedError> {
        let entry = *self.table.get(id)?;
        if entry.state != TaskState::Blocked {
            return Err(SchedError::InvalidState { task: id, state: entry.state });
        }
        let node = match entry.location {
            // Still current (blocked but not yet switched out): requeue in place.
            Location::OnCpu { node, .. } => node,
            Location::Parked { entity, .. } => {
                if !self.rq.has_room() {
                    return Err(SchedError::RunQueueFull);
                }
                self.rq.insert(entity).ok_or(SchedError::RunQueueFull)?
            }
        };
        self.rq.update_clock(now);
        let state = if self.rq.curr_node() == Some(node) { TaskState::Running } else { TaskState::Runnable };
        let e = self.table.get_mut(id)?;
        e.state = state;
        e.location = Location::OnCpu { cpu: self.rq.cpu(), node };
        self.rq.enqueue(node, EnqueueFlags::WAKEUP);
        self.rq.check_preempt_wakeup(node, flags);
        self.emit(now, EventKind::Waking { task: id });
        self.resched_if_needed();
        Ok(self.rq.need_resched())
    }

    /// A task exits. The current task keeps the CPU until the next
    /// [`Scheduler::schedule`]; any other task is gone at once. Its id becomes stale.
    pub fn exit(&mut self, now: u64, id: TaskId) -> Result<(), SchedError> {
        let entry = *self.table.get(id)?;
        self.rq.update_clock(now);
        match (entry.state, entry.location) {
            (TaskState::Exiting, _) => return Err(SchedError::InvalidState { task: id, state: entry.state }),
            (_, Location::Parked { mut entity, .. }) => {
                if entity.pelt_attached {
                    self.rq.remove_entity_load(&mut entity);
                }
                self.table.remove(id)?;
            }
            (_, Location::OnCpu { node, .. }) => {
                if self.rq.curr_node() == Some(node) {
                    self.rq.dequeue(node, DequeueFlags::SLEEP);
                    self.table.get_mut(id)?.state = TaskState::Exiting;
                    self.rq.resched_curr();
                } else {
                    self.rq.dequeue(node, DequeueFlags::SLEEP);
                    if let Some(mut e) = self.rq.take(node) {
                        self.rq.remove_entity_load(&mut e);
                    }
                    self.table.remove(id)?;
                }
            }
        }
        self.emit(now, EventKind::Exit { task: id });
        self.resched_if_needed();
        Ok(())
    }

    /// The scheduler tick. Returns whether the current task should be preempted.
    pub fn tick(&mut self, now: u64) -> bool {
        self.rq.update_clock(now);
        self.rq.task_tick();
        self.resched_if_needed();
        self.rq.need_resched()
    }

    /// Picks the task to run next and makes it current (`__schedule`). `None` means idle.
    /// A previous task that blocked or exited leaves the runqueue here: with one CPU no
    /// other CPU can run it before this one has switched away, so the switch is finished
    /// at once.
    pub fn schedule(&mut self, now: u64) -> Option<TaskId> {
        self.rq.update_clock(now);
        let (prev, next) = self.rq.schedule_pick();
        let prev_info = prev.map(|p| {
            let id = self.rq.ent(p).id;
            (id, self.table.get(id).map(|e| e.state).ok())
        });
        if let Some((id, _)) = prev_info {
            if prev != next {
                if let Ok(t) = self.table.get_mut(id) {
                    if t.state == TaskState::Running {
                        t.state = TaskState::Runnable;
                    }
                }
            }
        }
        if let Some(mut e) = self.rq.finish_switch() {
            let cpu = self.rq.cpu();
            if prev_info.and_then(|p| p.1) == Some(TaskState::Exiting) {
                if e.pelt_attached {
                    self.rq.remove_entity_load(&mut e);
                }
                let _ = self.table.remove(e.id);
            } else if let Ok(t) = self.table.get_mut(e.id) {
                t.location = Location::Parked { cpu, entity: e };
            }
        }
        let next_id = next.map(|n| self.rq.ent(n).id);
        if let Some(id) = next_id {
            if let Ok(t) = self.table.get_mut(id) {
                t.state = TaskState::Running;
            }
        }
        let prev_id = prev_info.map(|p| p.0);
        if prev_id != next_id {
            let prev_state = prev_info.and_then(|p| p.1).map(|s| match s {
                TaskState::Running => TaskState::Runnable,
                s => s,
            });
            self.emit(now, EventKind::Switch { prev: prev_id, prev_state, next: next_id });
        }
        next_id
    }

    /// The current task yields: it stays runnable but steps aside once. Requests a
    /// reschedule.
    pub fn yield_now(&mut self, now: u64) {
        if self.rq.curr_node().is_none() {
            return;
        }
        self.rq.update_clock(now);
        self.rq.yield_curr();
        self.rq.resched_curr();
        self.resched_if_needed();
    }

    /// Changes a task's nice value, wherever it is.
    pub fn set_nice(&mut self, now: u64, id: TaskId, nice: i32) -> Result<(), SchedError> {
        let nice = Nice::new(nice)?;
        let entry = *self.table.get(id)?;
        self.rq.update_clock(now);
        match entry.location {
            Location::Parked { cpu, mut entity } => {
                // Its blocked load is still in this runqueue's sums (if attached).
                self.rq.reweight_parked(&mut entity, nice);
                self.table.get_mut(id)?.location = Location::Parked { cpu, entity };
            }
            Location::OnCpu { node, .. } => {
                let old = self.rq.ent(node).nice;
                let queued = self.rq.ent(node).on_rq;
                let running = self.rq.curr_node() == Some(node);
                if queued {
                    self.rq.dequeue(node, DequeueFlags::SAVE);
                }
                if running {
                    self.rq.put_prev();
                }
                self.rq.reweight(node, nice);
                if queued {
                    self.rq.enqueue(node, EnqueueFlags::RESTORE);
                    // A better priority may now deserve the CPU; a running task that got
                    // worse may have to give it up.
                    if nice < old || (nice > old && running) {
                        self.rq.resched_curr();
                    }
                }
                if running {
                    self.rq.set_next(node);
                }
            }
        }
        self.resched_if_needed();
        Ok(())
    }

    /// Changes a task's allowed CPUs. On one CPU the mask must include it.
    pub fn set_affinity(&mut self, id: TaskId, mask: CpuMask) -> Result<(), SchedError> {
        self.check_affinity(&mask)?;
        let entry = *self.table.get(id)?;
        match entry.location {
            Location::Parked { cpu, mut entity } => {
                entity.affinity = mask;
                self.table.get_mut(id)?.location = Location::Parked { cpu, entity };
            }
            Location::OnCpu { node, .. } => {
                if let Some(e) = self.rq.ent_mut(node) {
                    e.affinity = mask;
                }
            }
        }
        Ok(())
    }

    /// Checks every invariant of the scheduler: the runqueue's own (see
    /// [`RunQueue::check`]), that `min_vruntime` never went back since the last check, and
    /// that the task table and the runqueue agree on where every task is and in which state.
    pub fn check_invariants(&mut self) -> Result<(), InvariantViolation> {
        let cpu = self.rq.cpu();
        let fail = |what| Err(InvariantViolation { cpu, what });
        self.rq.check()?;
        let mv = self.rq.min_vruntime();
        if crate::timeline::vruntime_before(mv, self.last_min_vruntime) {
            return fail("min_vruntime went backwards");
        }
        self.last_min_vruntime = mv;
        let mut on_cpu = 0;
        for (id, e) in self.table.iter() {
            match e.location {
                Location::OnCpu { node, .. } => {
                    on_cpu += 1;
                    let Some(ent) = self.rq.entity(node) else {
                        return fail("table points at an empty arena slot");
                    };
                    if ent.id != id {
                        return fail("arena slot holds another task");
                    }
                    let is_curr = self.rq.curr_node() == Some(node);
                    let ok = match e.state {
                        TaskState::Running => is_curr && ent.on_rq,
                        TaskState::Runnable => !is_curr && ent.on_rq,
                        TaskState::Blocked | TaskState::Exiting => is_curr && !ent.on_rq,
                    };
                    if !ok {
                        return fail("task state disagrees with the runqueue");
                    }
                }
                Location::Parked { entity, .. } => {
                    if e.state != TaskState::Blocked || entity.on_rq || entity.id != id {
                        return fail("parked task is not a blocked, unaccounted entity");
                    }
                }
            }
        }
        if on_cpu != self.rq.nr_attached() {
            return fail("arena holds tasks the table does not place there");
        }
        Ok(())
    }
}
