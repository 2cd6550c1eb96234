//! What the core needs from the machine it runs on, and what it tells it.
//!
//! The core never reads a clock or touches hardware: time comes in as nanoseconds with
//! every call, and the core calls back into the [`Platform`] for the few things only the
//! machine can do. The aarch64 kernel implements it with IPIs and its UART log; the
//! simulator with events in virtual time; tests with a recorder.

use crate::task::{TaskId, TaskState};

/// What a platform keeps with each task — its thread's index, a pointer, a handle — given
/// to the porter's `create` (or `Smp::create_with`) and handed back by `reschedule` or
/// `pick` (`Smp::schedule_switch`) under the lock that makes the switch, so a platform
/// needs no id → thread map of its own (and no race between publishing such a map and
/// another CPU picking the new task). `NONE` fills the slots no task holds, so an empty
/// machine is still a `const`, and is the payload of a task created without one; it need
/// not differ from real payloads. Give it zero bytes (`0`, `None`) to keep a `static`
/// machine in `.bss`.
///
/// ```
/// use sched_core::TaskPayload;
/// #[derive(Clone, Copy)]
/// struct ThreadIndex(u16);
/// impl TaskPayload for ThreadIndex {
///     const NONE: Self = ThreadIndex(0);
/// }
/// assert_eq!(<u32 as TaskPayload>::NONE, 0);
/// ```
pub trait TaskPayload: Copy + Send + 'static {
    /// The value of a slot that holds no task.
    const NONE: Self;
}

impl TaskPayload for () {
    const NONE: () = ();
}

macro_rules! zero_payload {
    ($($t:ty),*) => {$(
        impl TaskPayload for $t {
            const NONE: $t = 0;
        }
    )*};
}
zero_payload!(u8, u16, u32, u64, usize);

impl<T: Copy + Send + 'static> TaskPayload for Option<T> {
    const NONE: Self = None;
}

/// Services a platform provides to the core. All methods take `&self`: on SMP one
/// platform object is shared by every CPU, so implementations use interior mutability
/// (atomics, per-CPU buffers, a lock).
///
/// The methods run inside a scheduler call, so in whatever context the port makes it (an
/// interrupt handler's tick, say) and with that CPU's interrupts masked: they take only locks
/// no interrupted code can hold, and never wait for another CPU to act (an acknowledgement,
/// a mailbox); a scheduler call they make is fine (see `port::Scheduler` for which).
pub trait Platform {
    /// What the platform keeps with each task (see [`TaskPayload`]); `()` for none.
    type Payload: TaskPayload;

    /// CPU `cpu` must reschedule soon (`port::Scheduler::reschedule`, or `pick` and
    /// `finish`; `Smp::schedule` and `finish_switch` for a port on the machine itself). For
    /// the CPU running this (the port's own CPU id: through `port::Scheduler` a request may
    /// be delivered by another CPU's call) it is only a flag, which the port checks on its
    /// way out of every interrupt and call, `idle_enter` included, before it waits for an
    /// interrupt; for another CPU it means a reschedule IPI.
    fn resched_cpu(&self, cpu: usize);

    /// The load balancer wants CPU `cpu` to run its *active-balance stopper*: push its
    /// running task to another CPU. The core does the work inside that CPU's next
    /// reschedule (the stopper preempts the running task so its context is saved before it
    /// moves), so all a platform has to do is make `cpu` reschedule, which the default
    /// does.
    fn run_stopper(&self, cpu: usize) {
        self.resched_cpu(cpu);
    }

    /// Kick idle CPU `cpu` to run the nohz idle balance on behalf of all tickless idle
    /// CPUs. The core records the kick; the CPU carries it out at its next reschedule or
    /// tick, so all a platform has to do is wake it, which the default does.
    fn kick_nohz(&self, cpu: usize) {
        self.resched_cpu(cpu);
    }

    /// A clock (ns) for measuring how long a newly-idle balance pass and an idle-CPU scan
    /// take, which gates the next ones; only its differences count. `None` (the default)
    /// makes the core use a deterministic estimate instead. It is read while a wakeup holds
    /// its task in transit, and a call naming that task waits for it to land: a clock makes
    /// no call that names a task.
    fn clock_ns(&self) -> Option<u64> {
        None
    }

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
    type Payload = ();
    fn resched_cpu(&self, _cpu: usize) {}
}

/// Something the scheduler did, stamped with the time (ns) and CPU it happened on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Event {
    /// Time in ns, as passed by the platform.
    pub time: u64,
    /// The CPU whose runqueue changed.
    pub cpu: usize,
    /// What happened.
    pub kind: EventKind,
}

/// The kinds of [`Event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
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
        /// Runnable tasks on the CPU right after the wakee joined (1: it woke onto an idle
        /// CPU). Taken when the wakeup happened: a port that receives events later, as
        /// [`crate::port::Scheduler`]'s does, reads it here rather than from the CPU's stats.
        nr_running: u32,
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
    /// A task moved from one CPU to another (recorded with the destination as `cpu`).
    Migrate {
        /// The task.
        task: TaskId,
        /// Where it was.
        from: usize,
        /// Why it moved.
        reason: MigrateReason,
    },
    /// One load-balance attempt and its outcome.
    Balance(crate::balance::BalanceRecord),
}

/// Why a task changed CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum MigrateReason {
    /// A wakeup placed it on another CPU than it slept on.
    Wakeup,
    /// Fork or exec placement.
    Placement,
    /// The periodic, idle or newly-idle load balancer pulled it.
    Balance,
    /// The active-balance stopper pushed it while it was running.
    ActiveBalance,
    /// Its affinity no longer allowed its CPU.
    Affinity,
}

impl MigrateReason {
    /// Every reason, in [`MigrateReason::index`] order: a port's per-reason counters are an
    /// array of `ALL.len()`.
    pub const ALL: [MigrateReason; 5] = [
        MigrateReason::Wakeup,
        MigrateReason::Placement,
        MigrateReason::Balance,
        MigrateReason::ActiveBalance,
        MigrateReason::Affinity,
    ];

    /// Its position in [`MigrateReason::ALL`].
    ///
    /// ```
    /// use sched_core::MigrateReason;
    /// let counts = [0u64; MigrateReason::ALL.len()];
    /// assert_eq!(counts[MigrateReason::Balance.index()], 0);
    /// assert!(MigrateReason::ALL.iter().enumerate().all(|(i, r)| r.index() == i));
    /// ```
    pub const fn index(self) -> usize {
        self as usize
    }
}
