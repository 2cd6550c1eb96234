//! A snapshot of every task and CPU and the platform's request counts: what a refused call
//! must leave exactly as it was.

use super::*;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TaskSnap {
    pub(crate) id: TaskId,
    pub(crate) state: TaskState,
    pub(crate) cpu: usize,
    pub(crate) entity: Entity,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CpuSnap {
    pub(crate) nr_running: u32,
    pub(crate) curr: Option<TaskId>,
    pub(crate) switching_out: Option<TaskId>,
    /// Every task in the arena (queued, current, switching out), by slot.
    pub(crate) attached: Vec<(SlotId, TaskId)>,
    pub(crate) queued: Vec<TaskId>,
    pub(crate) has_room: bool,
    pub(crate) need_resched: bool,
    pub(crate) clock: u64,
    pub(crate) min_vruntime: u64,
    pub(crate) load_weight: u64,
    pub(crate) push: [Option<Push>; 2],
    pub(crate) active_balance: bool,
}

/// Everything a refused call must leave as it was.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Snapshot {
    pub(crate) nr_tasks: usize,
    pub(crate) tasks: Vec<TaskSnap>,
    pub(crate) cpus: Vec<CpuSnap>,
    /// Platform requests and events so far: resched, stopper, nohz kick, event.
    pub(crate) platform: [u64; 4],
}

impl Snapshot {
    pub(crate) fn task(&self, id: TaskId) -> Option<&TaskSnap> {
        self.tasks.iter().find(|t| t.id == id)
    }

    /// Whether `id` is current or being switched out on its CPU (its context is live).
    pub(crate) fn busy(&self, id: TaskId) -> bool {
        self.cpus.iter().any(|c| c.curr == Some(id) || c.switching_out == Some(id))
    }

    pub(crate) fn room_in(&self, mask: &CpuMask) -> bool {
        self.cpus.iter().enumerate().any(|(c, s)| mask.contains(c) && s.has_room)
    }

    /// Room for task `id` on a CPU of `mask`: a free slot, or one already reserved for it
    /// (a pending push).
    pub(crate) fn room_for(&self, id: TaskId, mask: &CpuMask) -> bool {
        let reserved = self
            .cpus
            .iter()
            .flat_map(|c| c.push.iter().flatten())
            .any(|p| p.task == id && mask.contains(p.dst as usize));
        reserved || self.room_in(mask)
    }

    /// The first difference from `other`, for failure messages.
    pub(crate) fn diff(&self, other: &Snapshot) -> String {
        if self.nr_tasks != other.nr_tasks {
            return format!("nr_tasks {} -> {}", self.nr_tasks, other.nr_tasks);
        }
        for (a, b) in self.tasks.iter().zip(&other.tasks) {
            if a != b {
                return format!("task before {a:?}\n  after {b:?}");
            }
        }
        if self.tasks.len() != other.tasks.len() {
            return format!("tasks {:?} -> {:?}", self.tasks, other.tasks);
        }
        for (c, (a, b)) in self.cpus.iter().zip(&other.cpus).enumerate() {
            if a != b {
                return format!("cpu {c} before {a:?}\n  after {b:?}");
            }
        }
        format!(
            "platform requests/events (resched, stopper, kick, event) {:?} -> {:?}",
            self.platform, other.platform
        )
    }
}

/// A task's entity, from the runqueue that holds it or else (asleep) from the task table.
/// Unlike `Smp::entity` it does not wait for a task in transit, which would hang the test.
pub(crate) fn entity_of<const T: usize>(m: &M<T>, id: TaskId) -> Result<Entity, SchedError> {
    let state = m.state(id)?;
    for c in 0..m.nr_cpus() {
        let found = m.with_cpu(c, |st| st.rq.attached().any(|(_, t)| t == id));
        if found == Ok(true) {
            // Attached there: it cannot be in transit, so this does not wait.
            return m.entity(id);
        }
    }
    match state {
        TaskState::Blocked => m.entity(id),
        state => Err(SchedError::InvalidState { task: id, state }),
    }
}

pub(crate) fn snapshot<const T: usize>(m: &M<T>, model: &Model) -> Snapshot {
    let n = m.nr_cpus();
    let cpus: Vec<CpuSnap> = (0..n)
        .map(|c| {
            m.with_cpu(c, |st| {
                let rq = &st.rq;
                let id_at = |node: Option<SlotId>| node.and_then(|n| rq.task_at(n));
                CpuSnap {
                    nr_running: rq.nr_running(),
                    curr: rq.curr_id(),
                    switching_out: id_at(rq.switching_out_slot()),
                    attached: rq.attached().collect(),
                    queued: rq.timeline_ids().collect(),
                    has_room: rq.has_room(),
                    need_resched: rq.need_resched(),
                    clock: rq.clock(),
                    min_vruntime: rq.min_vruntime(),
                    load_weight: rq.load_weight(),
                    push: st.push,
                    active_balance: st.active_balance,
                }
            })
            .expect("online cpu")
        })
        .collect();
    let mut ids: BTreeSet<TaskId> = model.live.keys().copied().collect();
    ids.extend(cpus.iter().flat_map(|c| c.attached.iter().map(|&(_, id)| id)));
    let tasks = ids
        .into_iter()
        .filter_map(|id| {
            Some(TaskSnap {
                id,
                state: m.state(id).ok()?,
                cpu: m.task_cpu(id).ok()?,
                entity: entity_of(m, id).ok()?,
            })
        })
        .collect();
    Snapshot { nr_tasks: m.nr_tasks(), tasks, cpus, platform: m.platform().counts() }
}
