//! What the core needs from the machine it runs on, and what it tells it.
//!
//! The core never reads a clock or touches hardware: time comes in as nanoseconds with
//! every call, and the core calls back into the [`Platform`] for the few things only the
//! machine can do. The aarch64 kernel implements it with IPIs and its UART log; the
//! simulator with events in virtual time; tests with a recorder.

use crate::task::{TaskId, TaskState};

/// Services a platform provides to the core. All methods take `&self`: on SMP one
/// platform object is shared by every CPU, so implementations use interior mutability
/// (atomics, per-CPU buffers, a lock).
pub trait Platform {
    /// CPU `cpu` must call `schedule` soon. For the calling CPU this is only a flag the
    /// platform checks on its way out of the interrupt or call; for another CPU it means a
    /// reschedule IPI.
    fn resched_cpu(&self, cpu: u32);

    /// A scheduling event happened; for traces and reports. The default ignores it.
    fn event(&self, event: &Event) {
        let _ = event;
    }
}

/// A platform that needs no services (resched requests are read back through
/// `need_resched`), for tests and simple drivers.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPlatform;

impl Platform for NoPlatform {
    fn resched_cpu(&self, _cpu: u32) {}
}

/// Something the scheduler did, stamped with the time (ns) and CPU it happened on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Time in ns, as passed by the platform.
    pub time: u64,
    /// The CPU whose runqueue changed.
    pub cpu: u32,
    /// What happened.
    pub kind: EventKind,
}

/// The kinds of [`Event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The CPU switched from `prev` (None: idle) to `next` (None: idle).
    Switch {
        /// The task switched out.
        prev: Option<TaskId>,
        /// The state it was left in.
        prev_state: Option<TaskState>,
        /// The task switched in.
        next: Option<TaskId>,
    },
    /// A blocked task was made runnable on this CPU.
    Waking {
        /// The task.
        task: TaskId,
    },
    /// A new task was made runnable on this CPU.
    NewTask {
        /// The task.
        task: TaskId,
    },
    /// A task exited.
    Exit {
        /// The task.
        task: TaskId,
    },
}
