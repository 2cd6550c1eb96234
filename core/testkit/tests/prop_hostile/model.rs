//! The model of the task set the oracle reads, and how generated arguments resolve against
//! it and the state before a call.

use super::*;

/// What the model expects of a live task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// Runnable or Running.
    Active,
    Blocked,
    /// Exited while its CPU still runs it or switches away from it.
    Exiting,
}

#[derive(Default)]
pub(crate) struct Model {
    /// The task table's capacity.
    pub(crate) tasks: usize,
    pub(crate) live: BTreeMap<TaskId, Class>,
    /// Ids of exited tasks, in the order they left, and as a set.
    pub(crate) exited: Vec<TaskId>,
    pub(crate) exited_set: BTreeSet<TaskId>,
    /// Per slot, the highest generation issued.
    pub(crate) max_gen: BTreeMap<u32, u32>,
}

impl Model {
    pub(crate) fn issued(&self, id: TaskId) -> bool {
        self.live.contains_key(&id) || self.exited_set.contains(&id)
    }

    /// The error an id calls for, if it does not name a live task.
    pub(crate) fn id_error(&self, id: TaskId) -> Option<SchedError> {
        if self.live.contains_key(&id) {
            None
        } else if self.exited_set.contains(&id) {
            Some(SchedError::StaleTask(id))
        } else {
            // Never issued here, but generations wrap: an id at most 2^31 behind its slot's
            // generation could have been issued before a wrap, and is stale; any other, or one
            // of a slot never handed out, is unknown.
            let slot = id.slot() as u32;
            let Some(&g) = self.max_gen.get(&slot) else { return Some(SchedError::UnknownTask(id)) };
            let now = if self.live.contains_key(&TaskId::new(slot, g)) { g } else { g.wrapping_add(1) };
            if (1..=1 << 31).contains(&now.wrapping_sub(id.generation())) {
                Some(SchedError::StaleTask(id))
            } else {
                Some(SchedError::UnknownTask(id))
            }
        }
    }

    pub(crate) fn nth_live(&self, k: u8, filter: impl Fn(TaskId, Class) -> bool) -> Option<TaskId> {
        let v: Vec<TaskId> = self.live.iter().filter(|(&id, &c)| filter(id, c)).map(|(&id, _)| id).collect();
        (!v.is_empty()).then(|| v[k as usize % v.len()])
    }

    pub(crate) fn never(&self, k: u8) -> TaskId {
        let slot = k as u32 % self.tasks as u32;
        match k % 4 {
            0 => TaskId::new(self.tasks as u32 + k as u32, 0),
            1 => TaskId::new(u32::MAX, u32::MAX),
            2 => TaskId::new(slot, self.max_gen.get(&slot).map_or(0, |g| g + 1)),
            _ => TaskId::new(slot, u32::MAX - k as u32),
        }
    }

    pub(crate) fn exit(&mut self, id: TaskId) {
        self.live.remove(&id);
        self.exited.push(id);
        self.exited_set.insert(id);
    }
}

pub(crate) fn resolve_cpu(a: CpuArg, n: usize) -> usize {
    match a {
        CpuArg::Online(k) => k as usize % n,
        CpuArg::PastEnd(k) => n + k as usize % 4,
        CpuArg::ArrayEnd => CPUS,
        CpuArg::Huge => usize::MAX,
        CpuArg::Wrap1 => (1usize << 32) + 1,
        CpuArg::Wrap0 => 1usize << 32,
    }
}

pub(crate) fn resolve_task(a: TaskArg, model: &Model, pre: &Snapshot) -> TaskId {
    let state = |id: TaskId| pre.task(id).map(|t| t.state);
    let live = |k| model.nth_live(k, |_, _| true).unwrap_or_else(|| model.never(k));
    match a {
        TaskArg::Current(k) => {
            let c = &pre.cpus[k as usize % pre.cpus.len()];
            c.curr.or(c.switching_out).unwrap_or_else(|| live(k))
        }
        TaskArg::Live(k) => live(k),
        TaskArg::Queued(k) => model
            .nth_live(k, |id, _| state(id) == Some(TaskState::Runnable) && !pre.busy(id))
            .unwrap_or_else(|| live(k)),
        TaskArg::Blocked(k) => model.nth_live(k, |_, c| c == Class::Blocked).unwrap_or_else(|| live(k)),
        TaskArg::Exited(k) if !model.exited.is_empty() => model.exited[k as usize % model.exited.len()],
        TaskArg::Exited(k) | TaskArg::Never(k) => model.never(k),
    }
}

pub(crate) fn resolve_mask(a: MaskArg, n: usize, pre: &Snapshot, task_cpu: Option<usize>) -> CpuMask {
    let away = |k: u8| {
        let own = task_cpu.unwrap_or(0);
        if n < 2 {
            CpuMask::single(own)
        } else {
            CpuMask::single((own + 1 + k as usize % (n - 1)) % n)
        }
    };
    match a {
        MaskArg::All => CpuMask::ALL,
        MaskArg::Single(k) => CpuMask::single(k as usize % n),
        MaskArg::Bits(b) => (0..n).filter(|c| b & (1 << (c % 8)) != 0).collect(),
        MaskArg::Empty => CpuMask::EMPTY,
        MaskArg::OfflineOnly => CpuMask::range(n, MAX_CPUS),
        MaskArg::OnlinePlusOffline(k) => CpuMask::single(k as usize % n).with(n).with(MAX_CPUS - 1),
        MaskArg::FullCpus(k) => {
            let m: CpuMask = pre
                .cpus
                .iter()
                .enumerate()
                .filter(|&(c, s)| !s.has_room && Some(c) != task_cpu)
                .map(|(c, _)| c)
                .collect();
            if m.is_empty() {
                away(k)
            } else {
                m
            }
        }
        MaskArg::Away(k) => away(k),
    }
}

pub(crate) fn resolve(op: Op, model: &Model, pre: &Snapshot, n: usize) -> (Call, u64) {
    let task_cpu = |id: TaskId| pre.task(id).map(|t| t.cpu);
    let own = |id: TaskId, cpu: Option<CpuArg>| match cpu {
        Some(a) => resolve_cpu(a, n),
        None => task_cpu(id).unwrap_or(0),
    };
    match op {
        Op::Create { cpu, nice, policy, mask } => {
            let policy = [Policy::Normal, Policy::Batch, Policy::Idle][policy as usize % 3];
            let affinity = resolve_mask(mask, n, pre, None);
            (Call::Create { cpu: resolve_cpu(cpu, n), params: TaskParams { nice, policy, affinity } }, 0)
        }
        Op::Block { task, cpu } => {
            let id = resolve_task(task, model, pre);
            (Call::Block { cpu: own(id, cpu), id }, 0)
        }
        Op::Wake { task, cpu, flags } => {
            let id = resolve_task(task, model, pre);
            let flags = flags.map(WakeFlags::from_bits_truncate);
            (Call::Wake { cpu: resolve_cpu(cpu, n), id, flags }, 0)
        }
        Op::Exit { task } => (Call::Exit { id: resolve_task(task, model, pre) }, 0),
        Op::Exec { task, cpu } => {
            let id = resolve_task(task, model, pre);
            (Call::Exec { cpu: own(id, cpu), id }, 0)
        }
        Op::SetNice { task, nice } => (Call::SetNice { id: resolve_task(task, model, pre), nice }, 0),
        Op::SetAffinity { task, mask } => {
            let id = resolve_task(task, model, pre);
            (Call::SetAffinity { id, mask: resolve_mask(mask, n, pre, task_cpu(id)) }, 0)
        }
        Op::Yield { cpu } => (Call::Yield { cpu: resolve_cpu(cpu, n) }, 0),
        Op::Tick { cpu, dt } => (Call::Tick { cpu: resolve_cpu(cpu, n) }, dt as u64),
        Op::Schedule { cpu, dt, finish } => (Call::Schedule { cpu: resolve_cpu(cpu, n), finish }, dt as u64),
        Op::FinishSwitch { cpu } => (Call::FinishSwitch { cpu: resolve_cpu(cpu, n) }, 0),
    }
}
