//! Operations as generated (arguments that may be out of range) and their strategies, the
//! concrete calls they resolve to, and how a call runs on the machine (`execute`).

use super::*;

/// A CPU argument; resolved against the number of online CPUs `n`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CpuArg {
    /// CPU `k % n`.
    Online(u8),
    /// `n + k % 4`: just past the last online CPU.
    PastEnd(u8),
    /// `CPUS`: past the end of the scheduler's arrays.
    ArrayEnd,
    /// `usize::MAX`.
    Huge,
    /// `2^32 + 1` (1 when truncated to 32 bits).
    Wrap1,
    /// `2^32` (0 when truncated to 32 bits).
    Wrap0,
}

/// An affinity-mask argument; some are resolved against the state before the call.
#[derive(Debug, Clone, Copy)]
pub(crate) enum MaskArg {
    All,
    Single(u8),
    /// Bit `c % 8` of the byte selects online CPU `c` (may come out empty).
    Bits(u8),
    Empty,
    /// Only CPUs that are not online (`n..MAX_CPUS`).
    OfflineOnly,
    /// One online CPU plus offline ones.
    OnlinePlusOffline(u8),
    /// The online CPUs whose runqueue is full, except the task's own (else like `Away`).
    FullCpus(u8),
    /// One online CPU other than the task's own.
    Away(u8),
}

/// A task argument; resolved against the model and the state before the call.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TaskArg {
    /// The current task of CPU `k % n` (else its switching-out task, else like `Live`).
    Current(u8),
    /// A live task of the model.
    Live(u8),
    /// A runnable task waiting on a timeline (else like `Live`).
    Queued(u8),
    /// A blocked task (else like `Live`).
    Blocked(u8),
    /// An id of a task that has exited (else like `Never`).
    Exited(u8),
    /// An id never issued.
    Never(u8),
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Create {
        cpu: CpuArg,
        nice: i32,
        policy: u8,
        mask: MaskArg,
    },
    /// `cpu: None`: the task's own CPU.
    Block {
        task: TaskArg,
        cpu: Option<CpuArg>,
    },
    /// `flags: None`: `wake`; else `wake_with` those flag bits.
    Wake {
        task: TaskArg,
        cpu: CpuArg,
        flags: Option<u8>,
    },
    Exit {
        task: TaskArg,
    },
    /// `cpu: None`: the task's own CPU.
    Exec {
        task: TaskArg,
        cpu: Option<CpuArg>,
    },
    SetNice {
        task: TaskArg,
        nice: i32,
    },
    SetAffinity {
        task: TaskArg,
        mask: MaskArg,
    },
    Yield {
        cpu: CpuArg,
    },
    Tick {
        cpu: CpuArg,
        dt: u32,
    },
    /// `schedule`, then `finish_switch` if `finish`.
    Schedule {
        cpu: CpuArg,
        dt: u32,
        finish: bool,
    },
    FinishSwitch {
        cpu: CpuArg,
    },
}

pub(crate) fn cpu_arg() -> impl Strategy<Value = CpuArg> {
    prop_oneof![
        44 => any::<u8>().prop_map(CpuArg::Online),
        1 => any::<u8>().prop_map(CpuArg::PastEnd),
        1 => Just(CpuArg::ArrayEnd),
        1 => Just(CpuArg::Huge),
        1 => Just(CpuArg::Wrap1),
        1 => Just(CpuArg::Wrap0),
    ]
}

pub(crate) fn mask_arg() -> impl Strategy<Value = MaskArg> {
    prop_oneof![
        6 => Just(MaskArg::All),
        5 => any::<u8>().prop_map(MaskArg::Single),
        3 => any::<u8>().prop_map(MaskArg::Bits),
        1 => Just(MaskArg::Empty),
        1 => Just(MaskArg::OfflineOnly),
        1 => any::<u8>().prop_map(MaskArg::OnlinePlusOffline),
        3 => any::<u8>().prop_map(MaskArg::FullCpus),
        3 => any::<u8>().prop_map(MaskArg::Away),
    ]
}

pub(crate) fn nice_arg() -> impl Strategy<Value = i32> {
    prop_oneof![
        12 => -20i32..=19,
        1 => prop::sample::select(vec![-21, 20, i32::MIN, i32::MAX, -1000, 1000]),
    ]
}

/// Task arguments with the given weights for (current, live, queued, blocked, exited, never).
pub(crate) fn task_arg(w: [u32; 6]) -> impl Strategy<Value = TaskArg> {
    prop_oneof![
        w[0] => any::<u8>().prop_map(TaskArg::Current),
        w[1] => any::<u8>().prop_map(TaskArg::Live),
        w[2] => any::<u8>().prop_map(TaskArg::Queued),
        w[3] => any::<u8>().prop_map(TaskArg::Blocked),
        w[4] => any::<u8>().prop_map(TaskArg::Exited),
        w[5] => any::<u8>().prop_map(TaskArg::Never),
    ]
}

/// Operations, with weights for block, wake and exit (a "sleepy" mix lets blocked tasks
/// pile up so the task table fills even on two CPUs).
pub(crate) fn op(block: u32, wake: u32, exit: u32) -> impl Strategy<Value = Op> {
    let own_cpu = prop_oneof![9 => Just(None), 1 => cpu_arg().prop_map(Some)];
    prop_oneof![
        14 => (cpu_arg(), nice_arg(), 0u8..3, mask_arg())
            .prop_map(|(cpu, nice, policy, mask)| Op::Create { cpu, nice, policy, mask }),
        block => (task_arg([12, 2, 1, 1, 1, 1]), own_cpu.clone()).prop_map(|(task, cpu)| Op::Block { task, cpu }),
        wake => (task_arg([1, 2, 1, 10, 1, 1]), cpu_arg(), prop_oneof![3 => Just(None), 1 => (0u8..4).prop_map(Some)])
            .prop_map(|(task, cpu, flags)| Op::Wake { task, cpu, flags }),
        exit => task_arg([3, 4, 2, 2, 1, 1]).prop_map(|task| Op::Exit { task }),
        3 => (task_arg([8, 2, 1, 1, 1, 1]), own_cpu).prop_map(|(task, cpu)| Op::Exec { task, cpu }),
        3 => (task_arg([2, 6, 2, 2, 1, 1]), nice_arg()).prop_map(|(task, nice)| Op::SetNice { task, nice }),
        7 => (task_arg([3, 3, 6, 2, 1, 1]), mask_arg()).prop_map(|(task, mask)| Op::SetAffinity { task, mask }),
        2 => cpu_arg().prop_map(|cpu| Op::Yield { cpu }),
        6 => (cpu_arg(), 0u32..4_000_000).prop_map(|(cpu, dt)| Op::Tick { cpu, dt }),
        12 => (cpu_arg(), 0u32..2_000_000, prop::bool::weighted(0.8))
            .prop_map(|(cpu, dt, finish)| Op::Schedule { cpu, dt, finish }),
        3 => cpu_arg().prop_map(|cpu| Op::FinishSwitch { cpu }),
    ]
}

pub(crate) fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop_oneof![
        3 => prop::collection::vec(op(9, 8, 4), 50..600),
        1 => prop::collection::vec(op(12, 3, 1), 50..600),
    ]
}

// ---- resolved calls -----------------------------------------------------------------------

/// One API call with concrete arguments.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Call {
    Create { cpu: usize, params: TaskParams },
    Block { cpu: usize, id: TaskId },
    Wake { cpu: usize, id: TaskId, flags: Option<WakeFlags> },
    Exit { id: TaskId },
    Exec { cpu: usize, id: TaskId },
    SetNice { id: TaskId, nice: i32 },
    SetAffinity { id: TaskId, mask: CpuMask },
    Yield { cpu: usize },
    Tick { cpu: usize },
    Schedule { cpu: usize, finish: bool },
    FinishSwitch { cpu: usize },
}

impl Call {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Call::Create { .. } => "create",
            Call::Block { .. } => "block",
            Call::Wake { flags: None, .. } => "wake",
            Call::Wake { .. } => "wake_with",
            Call::Exit { .. } => "exit",
            Call::Exec { .. } => "exec",
            Call::SetNice { .. } => "set_nice",
            Call::SetAffinity { .. } => "set_affinity",
            Call::Yield { .. } => "yield_now",
            Call::Tick { .. } => "tick",
            Call::Schedule { finish: true, .. } => "schedule+finish_switch",
            Call::Schedule { .. } => "schedule (no finish_switch)",
            Call::FinishSwitch { .. } => "finish_switch",
        }
    }

    /// The CPU argument, if the call has one.
    pub(crate) fn cpu(&self) -> Option<usize> {
        match *self {
            Call::Create { cpu, .. }
            | Call::Block { cpu, .. }
            | Call::Wake { cpu, .. }
            | Call::Exec { cpu, .. }
            | Call::Yield { cpu }
            | Call::Tick { cpu }
            | Call::Schedule { cpu, .. }
            | Call::FinishSwitch { cpu } => Some(cpu),
            Call::Exit { .. } | Call::SetNice { .. } | Call::SetAffinity { .. } => None,
        }
    }

    pub(crate) fn id(&self) -> Option<TaskId> {
        match *self {
            Call::Block { id, .. }
            | Call::Wake { id, .. }
            | Call::Exit { id }
            | Call::Exec { id, .. }
            | Call::SetNice { id, .. }
            | Call::SetAffinity { id, .. } => Some(id),
            _ => None,
        }
    }
}

/// What a call returned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Out {
    Unit,
    Id(TaskId),
    Cpu(usize),
    Pick(Option<TaskId>),
    Bool(bool),
}

pub(crate) fn execute<const T: usize>(m: &M<T>, now: u64, call: Call) -> Result<Out, SchedError> {
    match call {
        Call::Create { cpu, params } => m.create(cpu, now, params).map(Out::Id),
        Call::Block { cpu, id } => m.block(cpu, now, id).map(|_| Out::Unit),
        Call::Wake { cpu, id, flags: None } => m.wake(cpu, now, id).map(Out::Cpu),
        Call::Wake { cpu, id, flags: Some(f) } => m.wake_with(cpu, now, id, f).map(Out::Cpu),
        Call::Exit { id } => m.exit(now, id).map(|_| Out::Unit),
        Call::Exec { cpu, id } => m.exec(cpu, now, id).map(Out::Cpu),
        Call::SetNice { id, nice } => m.set_nice(now, id, nice).map(|_| Out::Unit),
        Call::SetAffinity { id, mask } => m.set_affinity(now, id, mask).map(|_| Out::Unit),
        Call::Yield { cpu } => m.yield_now(cpu, now).map(|()| Out::Unit),
        Call::Tick { cpu } => m.tick(cpu, now).map(Out::Bool),
        Call::Schedule { cpu, finish } => {
            let next = m.schedule(cpu, now)?;
            if finish {
                m.finish_switch(cpu, now)?;
            }
            Ok(Out::Pick(next))
        }
        Call::FinishSwitch { cpu } => m.finish_switch(cpu, now).map(|_| Out::Unit),
    }
}
