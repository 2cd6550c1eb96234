//! Who a task is and where it is in its life cycle: the two facts every module (errors, the
//! task table, events) names. A leaf: it imports nothing of the crate.

/// A task's identity: a slot in the task table plus the slot's generation when the task was
/// created. When a task exits its slot's generation moves on, so an old id does not name the
/// slot's next occupant: using it gives [`crate::SchedError::StaleTask`]. The generation is
/// 32 bits and wraps: an id kept while its slot is reused 2^31 times more is no longer told
/// apart (it is then [`crate::SchedError::UnknownTask`], and after 2^32 it names the slot's
/// occupant again), so a port does not keep ids of exited tasks for ever.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
// On 64-bit targets one aligned word, so that an id (alone or in an `Option`) moves with one
// load and one store: an id stored as two 32-bit halves and read back as one word cannot be
// forwarded from those stores, and the load waits for them to reach the cache.
#[cfg_attr(target_pointer_width = "64", repr(align(8)))]
pub struct TaskId {
    slot: u32,
    generation: u32,
}

impl TaskId {
    /// No task: names no slot (an empty runqueue slot, a waker that woke nobody yet).
    pub const NONE: TaskId = TaskId::new(u32::MAX, u32::MAX);

    /// Builds an id from its parts (the task table does this; platforms use it to rebuild
    /// ids they stored as integers with [`TaskId::to_raw`]).
    pub const fn new(slot: u32, generation: u32) -> TaskId {
        TaskId { slot, generation }
    }

    /// The task-table slot.
    pub const fn slot(self) -> usize {
        self.slot as usize
    }

    /// The slot generation this id was issued for.
    pub const fn generation(self) -> u32 {
        self.generation
    }

    /// Packs the id into one integer (generation high, slot low).
    pub const fn to_raw(self) -> u64 {
        ((self.generation as u64) << 32) | self.slot as u64
    }

    /// Inverse of [`TaskId::to_raw`].
    pub const fn from_raw(raw: u64) -> TaskId {
        TaskId { slot: raw as u32, generation: (raw >> 32) as u32 }
    }

    /// A small positive number for traces (`pid`): slot + 1, so 0 stays the idle task's
    /// (and [`TaskId::NONE`]'s, no task).
    pub const fn trace_pid(self) -> u32 {
        self.slot.wrapping_add(1)
    }
}

impl core::fmt::Debug for TaskId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "T{}.{}", self.slot, self.generation)
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for TaskId {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "T{}.{}", self.slot, self.generation)
    }
}

/// Where a task is in its life cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TaskState {
    /// Queued on a runqueue's timeline, waiting for a CPU.
    Runnable,
    /// The current task of a CPU.
    Running,
    /// Not runnable; waits for a wakeup.
    Blocked,
    /// Has exited but its CPU has not yet switched away from it.
    Exiting,
    /// Being created or woken: in transit to the runqueue chosen for it.
    Waking,
}
