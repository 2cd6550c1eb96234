//! Typed errors. Every fallible call leaves the scheduler's tasks, runqueues, tables and
//! settings as they were. (A wakeup refused late, when other CPUs filled the last free slots
//! while it chose, leaves behind only what its choice observed: the waker's wakee count and
//! the LLC's average scan cost, which every wakeup updates; a running task's affinity change
//! refused for want of room leaves that scan cost too.)

use crate::task::id::{TaskId, TaskState};
use crate::topology::TopologyError;

/// Why the core refused an operation. Non-exhaustive: a variant of a cargo feature
/// (`InvalidSlice`, of `eevdf`) is there only with it, so a match needs a `_` arm, and
/// another crate that turns a feature on in the same build breaks no match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum SchedError {
    /// A nice value outside −20..=19.
    InvalidNice(i32),
    /// An EEVDF slice (ns) outside 0.1–100 ms (the `eevdf` feature's `set_slice`; its
    /// 64-bit value would widen every `Result` of a build without EEVDF).
    #[cfg(feature = "eevdf")]
    InvalidSlice(u64),
    /// An affinity mask with no CPU in it.
    EmptyAffinity,
    /// An affinity mask that names no CPU this scheduler runs (or, for the one-CPU
    /// scheduler, does not include its CPU).
    AffinityNotOnline,
    /// The task table has no free slot.
    TaskTableFull,
    /// A runqueue's fixed capacity is exhausted.
    RunQueueFull,
    /// The id never named a task: its slot is out of range or never handed out, or its
    /// generation is ahead of the slot's (or more than 2^31 behind).
    UnknownTask(TaskId),
    /// The id named a task that has exited; its slot may hold another task now. (Its
    /// generation is behind the slot's, by at most 2^31: the counter wraps, so a made-up id
    /// that far behind reads as stale too.)
    StaleTask(TaskId),
    /// The operation does not apply to a task in this state.
    InvalidState {
        /// The task.
        task: TaskId,
        /// The state it is in.
        state: TaskState,
    },
    /// A CPU number outside the scheduler's range.
    CpuOutOfRange(usize),
    /// A tunable outside the range the core accepts (see [`crate::Tunables::check`]).
    InvalidTunable(&'static str),
    /// The CPU has not been brought up yet (see [`crate::port::Scheduler::cpu_up`]); placing
    /// work before every CPU is up would put it all on the CPUs that are.
    CpuNotUp(usize),
    /// A call into the scheduler on a CPU that is already inside one: from a platform callback
    /// or an interrupt taken with interrupts unmasked. Carried out it would deadlock.
    Reentered(usize),
    /// `now` was 0; times are nanoseconds of a monotonic clock that starts above 0.
    ZeroTime,
    /// [`crate::port::Scheduler::finish`] on a CPU with no switch picked: `finish` completes
    /// the switch its [`crate::port::Scheduler::pick`] began.
    NoSwitchPicked(usize),
    /// A switch was picked on this CPU and not finished yet (see
    /// [`crate::port::Scheduler::pick`]): finish it first.
    SwitchPending(usize),
    /// A call before `init` described the machine ([`crate::port::Scheduler::init`],
    /// [`crate::Smp::init`], [`crate::SingleCpu::init`]): there is no CPU and no task yet.
    /// Every call that names a CPU, an affinity or a task answers it then, whatever else is
    /// wrong with its input.
    NotInitialised,
    /// A task group operation was refused (the calls of the `groups` feature; the variant
    /// is there in every build).
    Group(GroupError),
}

impl From<GroupError> for SchedError {
    fn from(e: GroupError) -> SchedError {
        SchedError::Group(e)
    }
}

/// Why a group operation was refused. The group table is unchanged after any error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum GroupError {
    /// A `cpu.weight` outside 1..=10000.
    WeightOutOfRange(u32),
    /// A quota (ns) below 1 ms or above `group::bandwidth::MAX_QUOTA_NS`.
    QuotaOutOfRange(u64),
    /// A period (ns) outside 1 ms..=1 s.
    PeriodOutOfRange(u64),
    /// `cpu.max` text that is not a quota (µs or `max`) and an optional period (µs).
    Malformed,
    /// Every group slot is taken.
    TableFull,
    /// The id names no group (never, or one deleted since).
    UnknownGroup,
    /// The root group has no weight or limit of its own and cannot be deleted or moved.
    Root,
    /// The group still holds tasks or groups.
    NotEmpty,
    /// A task counted out of a group that holds none.
    NoTask,
    /// Groups would nest deeper than `group::tree::MAX_GROUP_DEPTH` (8).
    TooDeep,
    /// The move would put a group under itself.
    Cycle,
}

impl core::fmt::Display for GroupError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            GroupError::WeightOutOfRange(w) => write!(f, "cpu.weight {w} outside 1..=10000"),
            GroupError::QuotaOutOfRange(q) => write!(f, "quota {q} ns outside 1 ms..=2^44-1 µs"),
            GroupError::PeriodOutOfRange(p) => write!(f, "period {p} ns outside 1 ms..=1 s"),
            GroupError::Malformed => {
                f.write_str("cpu.max is a quota in µs or max, and an optional period in µs")
            }
            GroupError::TableFull => f.write_str("the group table is full"),
            GroupError::UnknownGroup => f.write_str("no such group"),
            GroupError::Root => f.write_str("the root group has no weight or limit and stays"),
            GroupError::NotEmpty => f.write_str("the group holds tasks or groups"),
            GroupError::NoTask => f.write_str("the group holds no task"),
            GroupError::TooDeep => f.write_str("groups would nest too deep"),
            GroupError::Cycle => f.write_str("a group cannot move under itself"),
        }
    }
}

impl core::error::Error for GroupError {}

impl core::fmt::Display for SchedError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SchedError::InvalidNice(n) => write!(f, "nice {n} is outside -20..=19"),
            #[cfg(feature = "eevdf")]
            SchedError::InvalidSlice(ns) => write!(f, "slice {ns} ns is outside 100000..=100000000"),
            SchedError::EmptyAffinity => f.write_str("affinity mask is empty"),
            SchedError::AffinityNotOnline => f.write_str("affinity mask names no online CPU"),
            SchedError::TaskTableFull => f.write_str("task table is full"),
            SchedError::RunQueueFull => f.write_str("runqueue is full"),
            SchedError::UnknownTask(t) => write!(f, "unknown task {t:?}"),
            SchedError::StaleTask(t) => write!(f, "task {t:?} has exited"),
            SchedError::InvalidState { task, state } => {
                write!(f, "operation invalid for task {task:?} in state {state:?}")
            }
            SchedError::CpuOutOfRange(c) => write!(f, "cpu {c} is out of range"),
            SchedError::InvalidTunable(name) => write!(f, "tunable {name} is out of range"),
            SchedError::CpuNotUp(cpu) => write!(f, "cpu {cpu} is not up yet"),
            SchedError::Reentered(cpu) => write!(f, "cpu {cpu} called the scheduler from inside a call"),
            SchedError::ZeroTime => f.write_str("time 0 is not a valid now"),
            SchedError::NoSwitchPicked(cpu) => write!(f, "cpu {cpu} has no switch picked to finish"),
            SchedError::SwitchPending(cpu) => write!(f, "cpu {cpu} has a switch picked and not finished"),
            SchedError::NotInitialised => f.write_str("the scheduler is not initialised (call init first)"),
            SchedError::Group(e) => write!(f, "group: {e}"),
        }
    }
}

impl core::error::Error for SchedError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            SchedError::Group(e) => Some(e),
            _ => None,
        }
    }
}

/// Why [`crate::Smp::init`] refused to set the machine up. Nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum InitError {
    /// The topology description was refused.
    Topology(TopologyError),
    /// The tick rate given to [`crate::Smp::new`] or [`crate::Smp::set_hz`] is above
    /// [`crate::smp::MAX_HZ`].
    Hz(u32),
    /// Tasks are alive: setting the machine up again would strand them on CPUs that may no
    /// longer exist. Holds how many.
    TasksAlive(usize),
    /// A tunable outside the range the core accepts (see [`crate::Tunables::check`]).
    InvalidTunable(&'static str),
}

impl From<TopologyError> for InitError {
    fn from(e: TopologyError) -> InitError {
        InitError::Topology(e)
    }
}

impl core::fmt::Display for InitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            InitError::Topology(e) => write!(f, "topology: {e}"),
            InitError::Hz(hz) => write!(f, "HZ {hz} is above {}", crate::limits::MAX_HZ),
            InitError::TasksAlive(n) => write!(f, "{n} tasks are alive; init only an idle machine"),
            InitError::InvalidTunable(name) => write!(f, "tunable {name} is out of range"),
        }
    }
}

impl core::error::Error for InitError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            InitError::Topology(e) => Some(e),
            _ => None,
        }
    }
}
