//! What the simulated tasks do and the state each carries: behaviours, the sysbench-like
//! event pool, the per-task record and the table of them by core task id.

use sched_core::{CpuMask, SchedError, TaskId, TaskParams};

/// What a task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behavior {
    /// Runs forever.
    Spinner,
    /// A thread of the workload program being run ([`Machine::start_program`](super::Machine::start_program)):
    /// its steps come from the program.
    Program {
        /// Its number in the program's run.
        thread: sched_workload::ThreadId,
    },
    /// Runs `run_ns`, sleeps `sleep_ns`, `repeat` times, then exits.
    Periodic {
        /// Work per period.
        run_ns: u64,
        /// Sleep per period.
        sleep_ns: u64,
        /// Periods.
        repeat: u32,
    },
}

/// What a run's pools of events (`take`) recorded, by event number across its pools.
#[derive(Debug, Clone, Default)]
pub struct EventPool {
    /// Latency of each finished event (ns): from its take to its work's end.
    pub latency: Vec<u64>,
    /// How many times each event was done (must be exactly once).
    pub done: Vec<u32>,
}

/// A task's record. `repr(C)`, with the fields every switch and tick touches first: with its
/// id they fill the first cache line of its [`TaskEntry`] (a 1024-CPU machine's records do not
/// stay in the caches between a task's runs).
#[derive(Debug, Clone)]
#[repr(C)]
pub(super) struct TaskSim {
    /// Work left in the current step.
    pub(super) remaining: u64,
    /// A wall-time step's end (rt-app's `runtime`): the step ends at the first moment from
    /// then that the task runs, whether it ran or waited meanwhile, so `remaining` is taken
    /// anew from it each time the task is switched in.
    pub(super) until: Option<u64>,
    /// Cache refill owed after a migration by a task switched in between two steps (woken,
    /// or back from a yield): its next work step pays it. (It starts running, and a wakeup's
    /// latency ends, at the switch itself.)
    pub(super) refill: u64,
    /// CPU time it has had (ns).
    pub(super) ran_ns: u64,
    pub(super) last_cpu: Option<usize>,
    /// When it last woke from a sleep and has not run since (latency probes: periodic tasks).
    pub(super) woke_at: Option<u64>,
    pub(super) behavior: Behavior,
    /// Steps taken so far (behaviour-specific meaning).
    pub(super) step: u32,
    /// A workload's label for the task's group (0 unless set with [`Machine::tag`](super::Machine::tag)).
    pub(super) tag: u8,
    pub(super) is_worker: bool,
    /// The event in progress and when it started.
    pub(super) event: Option<(u64, u64)>,
    pub(super) name: String,
}

/// A slot of [`TaskMap`]: the core's id of the task there and its record, from a cache line's
/// start.
#[derive(Debug)]
#[repr(C, align(64))]
pub(super) struct TaskEntry {
    pub(super) id: TaskId,
    pub(super) task: TaskSim,
}

/// The simulated tasks by core task id. The core's ids are table slots with a generation,
/// so a slot-indexed table does what a hash map did without hashing on every event.
#[derive(Debug, Default)]
pub(super) struct TaskMap {
    pub(super) slots: Vec<Option<TaskEntry>>,
    pub(super) len: usize,
}

impl TaskMap {
    pub(super) fn get(&self, id: &TaskId) -> Option<&TaskSim> {
        match self.slots.get(id.slot())? {
            Some(e) if e.id == *id => Some(&e.task),
            _ => None,
        }
    }

    /// The address of table slot `slot`'s entry (a prefetch hint; nothing is read).
    pub(super) fn entry_addr(&self, slot: usize) -> Option<*const u8> {
        self.slots.get(slot).map(|e| e as *const Option<TaskEntry> as *const u8)
    }

    pub(super) fn get_mut(&mut self, id: &TaskId) -> Option<&mut TaskSim> {
        match self.slots.get_mut(id.slot())? {
            Some(e) if e.id == *id => Some(&mut e.task),
            _ => None,
        }
    }

    pub(super) fn contains_key(&self, id: &TaskId) -> bool {
        self.get(id).is_some()
    }

    pub(super) fn insert(&mut self, id: TaskId, v: TaskSim) {
        let i = id.slot();
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        if self.slots[i].replace(TaskEntry { id, task: v }).is_none() {
            self.len += 1;
        }
    }

    pub(super) fn remove(&mut self, id: &TaskId) -> Option<TaskSim> {
        let slot = self.slots.get_mut(id.slot())?;
        if !matches!(slot, Some(e) if e.id == *id) {
            return None;
        }
        self.len -= 1;
        slot.take().map(|e| e.task)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<const C: usize, const G: usize> super::Machine<C, G> {
    /// Creates a task from `cpu` (its parent being the task running there) now. If `cpu`
    /// itself must reschedule, it gets a reschedule IPI. What the core refuses (a CPU out of
    /// range, an affinity naming no CPU of the machine, full runqueues or a full task table)
    /// is its error, and the machine is left as it was.
    ///
    /// ```
    /// use sched_core::{CpuMask, SchedError};
    /// use sched_sim::machine::{Behavior, Config, Machine};
    /// let mut m = Machine::<8>::new(Config::octo(1)).unwrap();
    /// let t = m.spawn(0, Behavior::Spinner, "s", CpuMask::single(3)).unwrap();
    /// assert_eq!(m.smp.task_cpu(t), Ok(3));
    /// assert_eq!(m.spawn(8, Behavior::Spinner, "s", CpuMask::ALL), Err(SchedError::CpuOutOfRange(8)));
    /// ```
    pub fn spawn(
        &mut self,
        cpu: usize,
        behavior: Behavior,
        name: &str,
        affinity: CpuMask,
    ) -> Result<TaskId, SchedError> {
        let id = self.spawn_inner(cpu, behavior, name, affinity)?;
        self.ipi_self_if_resched(cpu);
        Ok(id)
    }

    /// Creates a task from inside the event loop (the caller reschedules `cpu` if asked).
    pub(super) fn spawn_inner(
        &mut self,
        cpu: usize,
        behavior: Behavior,
        name: &str,
        affinity: CpuMask,
    ) -> Result<TaskId, SchedError> {
        let now = self.now.max(1);
        let id = self.smp.create(cpu, now, TaskParams { affinity, ..TaskParams::default() })?;
        self.now = now;
        let is_worker = match behavior {
            Behavior::Spinner => true,
            Behavior::Program { thread } => self.program.as_ref().is_some_and(|run| run.takes(thread)),
            _ => false,
        };
        let remaining = self.first_work(&behavior);
        self.tasks.insert(
            id,
            TaskSim {
                behavior,
                remaining,
                until: None,
                refill: 0,
                step: 0,
                event: None,
                last_cpu: None,
                name: name.replace([' ', '='], "_"),
                is_worker,
                ran_ns: 0,
                woke_at: None,
                tag: 0,
            },
        );
        if is_worker {
            self.workers += 1;
            self.first_worker_at.get_or_insert(self.now);
        }
        if let Some(t) = self.trace.as_mut() {
            let target = self.smp.task_cpu(id).unwrap_or(0);
            t.waking(self.now, target, id, name);
        }
        self.after_core_call(cpu);
        Ok(id)
    }

    pub(super) fn first_work(&mut self, b: &Behavior) -> u64 {
        match *b {
            Behavior::Spinner => u64::MAX / 4,
            Behavior::Periodic { run_ns, .. } => run_ns.max(1),
            // Its first step is taken when it first runs.
            Behavior::Program { .. } => 0,
        }
    }

    /// Records for `events` pool events, numbered from 0.
    pub(super) fn record_events(&mut self, events: u64) {
        self.pool = EventPool { latency: vec![0; events as usize], done: vec![0; events as usize] };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(step: u32) -> TaskSim {
        TaskSim {
            behavior: Behavior::Spinner,
            remaining: 0,
            until: None,
            refill: 0,
            step,
            event: None,
            last_cpu: None,
            name: String::new(),
            is_worker: false,
            ran_ns: 0,
            woke_at: None,
            tag: 0,
        }
    }

    #[test]
    fn task_map_tells_generations_of_a_slot_apart() {
        let mut m = TaskMap::default();
        let old = TaskId::new(3, 0);
        let new = TaskId::new(3, 1);
        m.insert(old, task(1));
        assert!(m.contains_key(&old) && !m.contains_key(&new));
        assert!(m.remove(&new).is_none(), "a different generation removes nothing");
        assert_eq!(m.remove(&old).map(|t| t.step), Some(1));
        assert!(m.is_empty());
        m.insert(new, task(2));
        assert!(m.get(&old).is_none(), "a stale id finds nothing in its reused slot");
        assert_eq!(m.get(&new).map(|t| t.step), Some(2));
        assert!(m.get(&TaskId::new(40, 0)).is_none(), "beyond the table");
        assert!(!m.is_empty());
    }
}
