//! The fair scheduler of one CPU: the [`Smp`] machinery with a single CPU, behind the
//! simpler API of a uniprocessor platform (no CPU numbers, and `schedule` finishes the
//! switch at once since no other CPU could run the previous task meanwhile).

use crate::cpumask::CpuMask;
use crate::error::{InitError, SchedError};
use crate::fair::WakeFlags;
use crate::features::{Features, Tunables};
use crate::limits::DEFAULT_HZ;
use crate::platform::Platform;
use crate::runqueue::InvariantViolation;
use crate::smp::Smp;
use crate::task::{Entity, TaskId, TaskParams, TaskState};
use crate::topology::TopologyDesc;
#[cfg(feature = "internals")]
use {
    crate::fair::Fair, crate::platform::TaskPayload, crate::runqueue::RunQueue, crate::smp::CpuState,
    crate::table::TaskTable, core::ops::Deref,
};

/// One CPU's fair scheduler with room for `TASKS` live tasks, of which up to `Q` can be
/// runnable at once.
///
/// ```
/// use sched_core::{NoPlatform, SingleCpu, TaskParams, Tunables, Features};
/// let s: SingleCpu<NoPlatform, 16, 16> =
///     SingleCpu::new(NoPlatform, 1024, Tunables::for_cpus(1), Features::default()).unwrap();
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
pub struct SingleCpu<P: Platform, const TASKS: usize, const Q: usize> {
    smp: Smp<P, 1, TASKS, Q>,
}

#[cfg(feature = "internals")]
/// Read access to the runqueue (holds its lock while alive).
pub struct RqRef<'a, const Q: usize>(crate::locks::MutexGuard<'a, spin::Spin, CpuState<Q>>);

#[cfg(feature = "internals")]
impl<const Q: usize> Deref for RqRef<'_, Q> {
    type Target = RunQueue<Q>;
    fn deref(&self) -> &RunQueue<Q> {
        &self.0.rq
    }
}

#[cfg(feature = "internals")]
/// Read access to the task table (holds its lock while alive).
pub struct TasksRef<'a, const N: usize, T: TaskPayload>(
    crate::locks::MutexGuard<'a, spin::Spin, TaskTable<N, T>>,
);

#[cfg(feature = "internals")]
impl<const N: usize, T: TaskPayload> Deref for TasksRef<'_, N, T> {
    type Target = TaskTable<N, T>;
    fn deref(&self) -> &TaskTable<N, T> {
        &self.0
    }
}

impl<P: Platform, const TASKS: usize, const Q: usize> SingleCpu<P, TASKS, Q> {
    /// A scheduler for one CPU of original capacity `capacity_orig` (1024 for a big CPU;
    /// taken within 1..=1024, the capacity scale). Refuses tunables out of range
    /// ([`InitError::InvalidTunable`], naming the field). The same as [`SingleCpu::empty`]
    /// then [`SingleCpu::init`], with its error.
    ///
    /// ```
    /// use sched_core::{Features, InitError, NoPlatform, SingleCpu, Tunables};
    /// let bad = Tunables { latency_ns: 0, ..Tunables::for_cpus(1) };
    /// let s = SingleCpu::<NoPlatform, 8, 8>::new(NoPlatform, 1024, bad, Features::default());
    /// assert_eq!(s.err(), Some(InitError::InvalidTunable("latency_ns")));
    /// ```
    pub fn new(
        platform: P,
        capacity_orig: u64,
        tunables: Tunables,
        features: Features,
    ) -> Result<Self, InitError> {
        let s = Self::empty(platform);
        s.init(capacity_orig, tunables, features)?;
        Ok(s)
    }

    /// A scheduler with no CPU yet, `const` so that it can be a `static`: with a platform of
    /// zeros (such as a unit struct) it is all zeros, so it costs no `.data` (no copy in
    /// flash) and no code to build. Call [`SingleCpu::init`] before anything else; until
    /// then the life-cycle calls find no CPU and do nothing, and the views of the
    /// `internals` feature (`rq`, `tasks`, `with_fair`) show unset state that means
    /// nothing: do not read them before `init`. Its calls take `&self` and lock as
    /// [`Smp`]'s do: mask interrupts around each one.
    ///
    /// ```
    /// use sched_core::{Features, NoPlatform, SingleCpu, TaskParams, Tunables};
    /// static CPU: SingleCpu<NoPlatform, 8, 8> = SingleCpu::empty(NoPlatform);
    /// CPU.init(1024, Tunables::for_cpus(1), Features::DEFAULT).unwrap();
    /// let t = CPU.create(0, TaskParams::default()).unwrap();
    /// assert_eq!(CPU.schedule(0), Some(t));
    /// ```
    pub const fn empty(platform: P) -> Self {
        SingleCpu { smp: Smp::new(platform, Features::DEFAULT, DEFAULT_HZ) }
    }

    /// Sets the machine up: its CPU of capacity `capacity_orig` (taken within 1..=1024),
    /// tunables and features. Refuses tunables out of range and a machine with live tasks;
    /// nothing changes then.
    pub fn init(&self, capacity_orig: u64, tunables: Tunables, features: Features) -> Result<(), InitError> {
        if let Err(SchedError::InvalidTunable(name)) = tunables.check() {
            return Err(InitError::InvalidTunable(name));
        }
        let capacity = [capacity_orig.clamp(1, 1024)];
        let desc = TopologyDesc {
            nr_cpus: 1,
            smt: &[],
            clusters: &[],
            nodes: &[],
            capacity: &capacity,
            asym_packing: None,
        };
        // One CPU of a capacity within the scale is always a valid topology and the HZ is
        // the default, so this refuses only a machine with live tasks, before any change.
        self.smp.init(&desc)?;
        self.smp.set_features(features);
        // Checked above.
        let _ = self.smp.set_tunables(tunables);
        Ok(())
    }

    internal! {
        /// The underlying one-CPU [`Smp`].
        pub fn smp(&self) -> &Smp<P, 1, TASKS, Q> {
            &self.smp
        }
    }

    /// The platform.
    pub fn platform(&self) -> &P {
        self.smp.platform()
    }

    #[cfg(feature = "internals")]
    /// The runqueue (read-only; locked while the returned guard lives).
    pub fn rq(&self) -> RqRef<'_, Q> {
        RqRef(self.smp.cpus[0].rq.lock())
    }

    #[cfg(feature = "internals")]
    /// Runs `f` on the fair class's view of the runqueue, its lock held: for benchmarks and
    /// experiments that drive the fair class directly (which bypasses the task table, so
    /// only what `f` leaves consistent stays consistent).
    ///
    /// ```
    /// use sched_core::{NoPlatform, SingleCpu, TaskParams, Tunables, Features};
    /// let s: SingleCpu<NoPlatform, 4, 4> =
    ///     SingleCpu::new(NoPlatform, 1024, Tunables::for_cpus(1), Features::default()).unwrap();
    /// s.create(0, TaskParams::default()).unwrap();
    /// assert_eq!(s.with_fair(|rq| rq.nr_running()), 1);
    /// ```
    pub fn with_fair<T>(&self, f: impl FnOnce(&mut Fair<'_, '_, Q>) -> T) -> T {
        let pool = self.smp.pool();
        let mut st = self.smp.cpus[0].rq.lock();
        f(&mut st.rq.fair(pool))
    }

    #[cfg(feature = "internals")]
    /// The live tasks (locked while the returned guard lives).
    pub fn tasks(&self) -> TasksRef<'_, TASKS, P::Payload> {
        TasksRef(self.smp.tasks.lock())
    }

    /// Changes features and tunables at run time; tunables out of range are refused and
    /// nothing changes.
    pub fn configure(&self, tunables: Tunables, features: Features) -> Result<(), SchedError> {
        self.smp.set_tunables(tunables)?;
        self.smp.set_features(features);
        Ok(())
    }

    /// The task running now, if any.
    pub fn current(&self) -> Option<TaskId> {
        self.smp.current(0)
    }

    /// Whether the platform should call [`SingleCpu::schedule`].
    pub fn need_resched(&self) -> bool {
        self.smp.need_resched(0)
    }

    /// A task's state.
    pub fn state(&self, id: TaskId) -> Result<TaskState, SchedError> {
        self.smp.state(id)
    }

    internal! {
        /// A copy of a task's entity, wherever it is.
        pub fn entity(&self, id: TaskId) -> Result<Entity, SchedError> {
            self.smp.entity(id)
        }
    }

    /// Creates a task and makes it runnable (fork + wake_up_new_task). The creating
    /// context is the current task, whose vruntime the child inherits.
    pub fn create(&self, now: u64, params: TaskParams) -> Result<TaskId, SchedError> {
        self.smp.create(0, now, params)
    }

    /// The current task blocks (sleeps). It keeps the CPU until the platform calls
    /// [`SingleCpu::schedule`], which this requests.
    pub fn block(&self, now: u64, id: TaskId) -> Result<(), SchedError> {
        self.smp.block(0, now, id)
    }

    /// Wakes a blocked task. Returns whether the running task should be preempted.
    pub fn wake(&self, now: u64, id: TaskId) -> Result<bool, SchedError> {
        self.wake_with(now, id, WakeFlags::empty())
    }

    /// Wakes a blocked task with wakeup hints.
    pub fn wake_with(&self, now: u64, id: TaskId, flags: WakeFlags) -> Result<bool, SchedError> {
        self.smp.wake_with(0, now, id, flags)?;
        Ok(self.smp.need_resched(0))
    }

    /// A task exits. The current task keeps the CPU until the next
    /// [`SingleCpu::schedule`]; any other task is gone at once. Its id becomes stale.
    pub fn exit(&self, now: u64, id: TaskId) -> Result<(), SchedError> {
        self.smp.exit(now, id)
    }

    /// The scheduler tick. Returns whether the current task should be preempted. Before
    /// [`SingleCpu::init`] it does nothing and returns false (the core's
    /// [`SchedError::NotInitialised`] is not passed on).
    pub fn tick(&self, now: u64) -> bool {
        // CPU 0 always exists here.
        self.smp.tick(0, now).unwrap_or(false)
    }

    /// Picks the task to run next and makes it current (`__schedule`). `None` means idle,
    /// and is also the answer before [`SingleCpu::init`] (the core's
    /// [`SchedError::NotInitialised`] is not passed on): a port that has not called `init`
    /// idles.
    pub fn schedule(&self, now: u64) -> Option<TaskId> {
        let next = self.smp.schedule(0, now).unwrap_or(None);
        let _ = self.smp.finish_switch(0, now);
        next
    }

    /// The current task yields: it stays runnable but steps aside once. Requests a
    /// reschedule. Before [`SingleCpu::init`] it does nothing.
    pub fn yield_now(&self, now: u64) {
        let _ = self.smp.yield_now(0, now);
    }

    /// Changes a task's nice value, wherever it is.
    pub fn set_nice(&self, now: u64, id: TaskId, nice: i32) -> Result<(), SchedError> {
        self.smp.set_nice(now, id, nice)
    }

    /// Changes a task's allowed CPUs. On one CPU the mask must include CPU 0.
    pub fn set_affinity(&self, id: TaskId, mask: CpuMask) -> Result<(), SchedError> {
        self.smp.set_affinity(0, id, mask)
    }

    /// Checks every invariant (see [`Smp::check_invariants`]).
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.smp.check_invariants()
    }
}
