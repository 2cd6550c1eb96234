//! Typed errors. Every fallible call leaves the scheduler's state exactly as it was.

use crate::task::{TaskId, TaskState};

/// Why the core refused an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedError {
    /// A nice value outside −20..=19.
    InvalidNice(i32),
    /// An affinity mask with no CPU in it.
    EmptyAffinity,
    /// An affinity mask that names no CPU this scheduler runs (or, for the one-CPU
    /// scheduler, does not include its CPU).
    AffinityNotOnline,
    /// The task table has no free slot.
    TaskTableFull,
    /// A runqueue's fixed capacity is exhausted.
    RunQueueFull,
    /// The id never named a task, or its slot is out of range.
    UnknownTask(TaskId),
    /// The id named a task that has exited; its slot may hold another task now.
    StaleTask(TaskId),
    /// The operation does not apply to a task in this state.
    InvalidState {
        /// The task.
        task: TaskId,
        /// The state it is in.
        state: TaskState,
    },
    /// A CPU number outside the scheduler's range.
    CpuOutOfRange(u32),
}

impl core::fmt::Display for SchedError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SchedError::InvalidNice(n) => write!(f, "nice {n} is outside -20..=19"),
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
        }
    }
}
