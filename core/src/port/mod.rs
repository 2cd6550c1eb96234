//! The porter's API: [`Scheduler`], what a kernel calls to host sched-core, with the calling
//! contract checked where the core can see it broken.
//!
//! The whole sequence, per CPU (PORTING.md has the contract table and the worked ports):
//!
//! 1. boot: [`Scheduler::new`] (a `static`), then [`Scheduler::init`] once with the machine;
//! 2. each CPU, before it takes work: [`Scheduler::cpu_up`]. Creating or waking a task
//!    before every CPU is up is refused ([`SchedError::CpuNotUp`]): placement would see only
//!    the CPUs that are up and put every task there;
//! 3. the timer interrupt: [`Scheduler::tick`]; on the way out of any interrupt or call,
//!    when [`Scheduler::need_resched`] says so (also after the running task blocked, exited
//!    or yielded, and after a [`Platform::resched_cpu`] IPI from another CPU):
//!    [`Scheduler::reschedule`], which switches as often as the core needs and hands back the
//!    task to run with the payload the port gave [`Scheduler::create`];
//! 4. the task's calls: create, block, wake, exit, yield, nice, affinity;
//! 5. idle: [`Scheduler::idle_enter`] (stop the tick only when it says so) and
//!    [`Scheduler::idle_exit`] when an interrupt ends the idle period; a kicked tickless CPU
//!    balances for the others inside its next `reschedule` (or [`Scheduler::serve_kick`]).
//!
//! A port that must act between choosing the next task and completing the switch (store the
//! previous context, switch stacks) uses [`Scheduler::pick`] and [`Scheduler::finish`]
//! instead of `reschedule`. Each exit is reported exactly once, when the task is gone and its
//! thread can be freed: [`Scheduler::exit`]'s answer, or the finishing switch.
//!
//! Every call names the CPU it runs on and is made with that CPU's interrupts masked. No
//! [`Platform`] callback runs under a lock of the machine: what a call decides to tell the
//! platform is recorded while locked and delivered at the end of the call (see [`Deferred`];
//! the clock is asked at once, with no lock held either). A callback may therefore call
//! anything (but the clock, read while a wakeup holds its task in transit, names no task: a
//! call naming that task would wait for it to land): a call that enters a CPU still inside a
//! call on the callback's CPU returns
//! [`SchedError::Reentered`], as does such a call from an interrupt taken with interrupts
//! unmasked, and every other call runs. The reads ([`Scheduler::current`],
//! [`Scheduler::payload`], [`Scheduler::state`], [`Scheduler::task_cpu`],
//! [`Scheduler::balance_report`]) enter no CPU and are not checked: from such an interrupt
//! they may wait for the call it interrupted, so they too are made with interrupts masked. A
//! request for a CPU that another CPU posts while it is inside a call reaches it at the end of
//! that call, and [`Scheduler::need_resched`] and [`Scheduler::reschedule`] count it. `now` is
//! nanoseconds of one monotonic clock all CPUs share; 0 is refused ([`SchedError::ZeroTime`]).
//!
//! (The example brings both CPUs up from one thread, as a test may; a kernel calls
//! [`Scheduler::cpu_up`] on each CPU itself, before it unmasks that CPU's interrupts.)
//!
//! ```
//! use sched_core::port::Scheduler;
//! use sched_core::{Features, NoPlatform, TaskParams};
//! static SCHED: Scheduler<NoPlatform, 2, 16, 16> = Scheduler::new(NoPlatform, Features::DEFAULT, 250);
//! SCHED.init_with(|t| t.init_flat(2)).unwrap();
//! let now = 1_000;
//! SCHED.cpu_up(0, now).unwrap();
//! assert!(SCHED.create(0, now, TaskParams::default(), ()).is_err()); // CPU 1 is not up
//! SCHED.cpu_up(1, now).unwrap();
//! let t = SCHED.create(0, now, TaskParams::default(), ()).unwrap();
//! let cpu = SCHED.task_cpu(t).unwrap();
//! // (`on_switch` sees each pass: a task in its `exited` is gone, and its thread is freed there.)
//! let run = SCHED.reschedule(cpu, now, |sw| if let Some((_gone, ())) = sw.exited { /* free it */ }).unwrap();
//! assert_eq!(run.next, Some((t, ())));
//! ```

mod deferred;
#[cfg(feature = "groups")]
mod groups;
mod report;
pub use deferred::Deferred;
pub use report::{BalanceReport, CpuStats};

use portable_atomic::{AtomicBool, AtomicU32, Ordering};
use spin::{RelaxStrategy, Spin};

use crate::cpumask::CpuMask;
use crate::error::{InitError, SchedError};
use crate::fair::WakeFlags;
use crate::features::{Features, Tunables};
use crate::platform::Platform;
use crate::runqueue::InvariantViolation;
use crate::smp::{Smp, Switch};
use crate::task::{TaskId, TaskParams, TaskState};
use crate::topology::{Topology, TopologyDesc, TopologyError};

/// The most schedule-and-finish passes one [`Scheduler::reschedule`] makes. One pass picks;
/// a pass that switches the running task out for the active-balance stopper or a planned
/// move picks nothing and asks for another. More than that means other CPUs keep preempting
/// this one; the port gets [`Resched::again`] and calls again on its next way out rather
/// than loop with interrupts masked.
pub const MAX_PASSES: usize = 4;

/// What [`Scheduler::reschedule`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resched<T> {
    /// The task to run now and its payload; `None`: idle.
    pub next: Option<(TaskId, T)>,
    /// The core still wants a reschedule after [`MAX_PASSES`]: call again soon.
    pub again: bool,
}

/// Per-CPU state of the facade: brought up, inside a call, a switch picked and not finished.
struct PortCpu {
    up: AtomicBool,
    inside: AtomicBool,
    picked: AtomicBool,
}

/// Marks a CPU inside a call until left (or dropped). Leaving hands the port, with every lock
/// of the machine released, what the call recorded for it (see [`Deferred`]): first while
/// the CPU still counts as inside, so a callback that names it is refused rather than nested,
/// then once more after, for what another CPU left it meanwhile.
struct Inside<'a, P: Platform, const CPUS: usize, const EVENTS: usize, R: RelaxStrategy> {
    me: usize,
    cpus: &'a [PortCpu; CPUS],
    deferred: &'a Deferred<P, CPUS, EVENTS, R>,
    left: bool,
}

impl<P: Platform, const CPUS: usize, const EVENTS: usize, R: RelaxStrategy> Inside<'_, P, CPUS, EVENTS, R> {
    /// Ends the call. Returns whether a request for this CPU itself (reschedule, stopper,
    /// kick) was delivered on the way out: the port heard of it before the call returned,
    /// perhaps after it last asked [`Scheduler::need_resched`].
    fn leave(&mut self) -> bool {
        if core::mem::replace(&mut self.left, true) {
            return false;
        }
        let cpus = self.cpus;
        let own = self.deferred.deliver(self.me, |c| cpus[c].inside.load(Ordering::SeqCst));
        cpus[self.me].inside.store(false, Ordering::SeqCst);
        // What another CPU posted for this one while it still looked inside: this CPU
        // cleared its flag (sequentially consistent) before looking, and a poster sets the
        // bit before reading the flag, so one of the two delivers it, exactly once.
        self.deferred.deliver_requests(self.me) | own
    }
}

impl<P: Platform, const CPUS: usize, const EVENTS: usize, R: RelaxStrategy> Drop
    for Inside<'_, P, CPUS, EVENTS, R>
{
    fn drop(&mut self) {
        self.leave();
    }
}

/// sched-core for a kernel: an [`Smp`] machine of up to `CPUS` CPUs, `TASKS` live tasks and
/// `Q` runnable per CPU, behind the calls a port makes, each checked against the calling
/// contract (see the module documentation). `P::Payload` is what the port keeps per task.
/// `EVENTS` is how many [`crate::Event`]s can wait for delivery at once (see
/// [`Scheduler::events_lost`]; at least 1, which a build checks). `G` is how many task groups
/// it holds besides the root (the `groups` feature; each CPU's runqueue gives `G` of its `Q`
/// slots to their entities).
pub struct Scheduler<
    P: Platform,
    const CPUS: usize,
    const TASKS: usize,
    const Q: usize,
    R: RelaxStrategy = Spin,
    const EVENTS: usize = DEFAULT_EVENTS,
    const G: usize = 0,
> {
    smp: Smp<Deferred<P, CPUS, EVENTS, R>, CPUS, TASKS, Q, R, G>,
    cpus: [PortCpu; CPUS],
    /// How many CPUs are up (each counted once, by its `cpu_up`).
    nr_up: AtomicU32,
}

/// How many events a [`Scheduler`] queues between deliveries unless told otherwise: more than
/// one call of a machine of 8 CPUs makes (a newly-idle pass over three domain levels with its
/// migrations, and the switch).
pub const DEFAULT_EVENTS: usize = 64;

impl<
        P: Platform,
        const CPUS: usize,
        const TASKS: usize,
        const Q: usize,
        R: RelaxStrategy,
        const EVENTS: usize,
        const G: usize,
    > Scheduler<P, CPUS, TASKS, Q, R, EVENTS, G>
{
    /// A scheduler with no CPU yet, for a `static` (all zeros with the default features and
    /// HZ; see [`Smp::new`]). `hz` is the rate of the port's tick on a busy CPU (0 means
    /// [`crate::smp::DEFAULT_HZ`]; above [`crate::smp::MAX_HZ`] `init` refuses it): the core
    /// counts balance intervals in its jiffies.
    ///
    /// A queue of no events does not build:
    ///
    /// ```compile_fail
    /// use sched_core::{port::Scheduler, Features, NoPlatform};
    /// static S: Scheduler<NoPlatform, 1, 4, 4, sched_core::spin::Spin, 0> =
    ///     Scheduler::new(NoPlatform, Features::DEFAULT, 250);
    /// ```
    pub const fn new(platform: P, features: Features, hz: u32) -> Self {
        const { assert!(EVENTS > 0, "Scheduler: EVENTS (events waiting for delivery at once) must be at least 1") };
        Scheduler {
            smp: Smp::new(Deferred::new(platform), features, hz),
            cpus: [const {
                PortCpu {
                    up: AtomicBool::new(false),
                    inside: AtomicBool::new(false),
                    picked: AtomicBool::new(false),
                }
            }; CPUS],
            nr_up: AtomicU32::new(0),
        }
    }

    /// Sets HZ at boot, before [`Scheduler::init`] (see [`Smp::set_hz`]): refused above
    /// [`crate::smp::MAX_HZ`] and while tasks are alive.
    pub fn set_hz(&self, hz: u32) -> Result<(), InitError> {
        self.smp.set_hz(hz)
    }

    /// The tick rate.
    pub fn hz(&self) -> u32 {
        self.smp.hz()
    }

    /// Sets the feature switches, at boot or at run time (an A/B experiment switches a rule
    /// between runs); from any CPU.
    pub fn set_features(&self, features: Features) {
        self.smp.set_features(features)
    }

    /// The feature switches.
    pub fn features(&self) -> Features {
        self.smp.features()
    }

    /// The tunables (Linux's `sched_latency_ns`, `sched_min_granularity_ns`, ...: the same on
    /// every CPU; `init` sets the defaults for the CPU count, [`Tunables::for_cpus`]). Before
    /// `init`, all zero.
    pub fn tunables(&self) -> Tunables {
        self.smp.tunables()
    }

    /// Replaces the tunables on every CPU, at boot or at run time; from any CPU, but not from
    /// a callback of a scheduler call. Values out of range ([`Tunables::check`]) are refused
    /// with [`SchedError::InvalidTunable`], and before `init` with
    /// [`SchedError::NotInitialised`]; then nothing changes.
    ///
    /// ```
    /// use sched_core::port::Scheduler;
    /// use sched_core::{Features, NoPlatform, SchedError};
    /// static S: Scheduler<NoPlatform, 2, 8, 8> = Scheduler::new(NoPlatform, Features::DEFAULT, 250);
    /// S.init_with(|t| t.init_flat(2)).unwrap();
    /// let mut t = S.tunables();
    /// t.min_granularity_ns = 3_000_000;
    /// S.set_tunables(t).unwrap();
    /// assert_eq!(S.tunables().min_granularity_ns, 3_000_000);
    /// t.latency_ns = 0;
    /// assert!(matches!(S.set_tunables(t), Err(SchedError::InvalidTunable(_))));
    /// assert_eq!(S.tunables().min_granularity_ns, 3_000_000);
    /// ```
    pub fn set_tunables(&self, t: Tunables) -> Result<(), SchedError> {
        self.smp.set_tunables(t)
    }

    /// Sets the machine up from a description; every CPU must then come up again.
    pub fn init(&self, desc: &TopologyDesc<'_>) -> Result<(), InitError> {
        self.init_with(|t| t.init(desc))
    }

    /// [`Scheduler::init`] with a topology preset, e.g. `init_with(|t| t.init_flat(2))`.
    /// A builder of [`Topology`] checks before it writes, so a refused one changes nothing;
    /// `build` must return the builder's result as it is. (A closure that builds and then
    /// returns an error of its own has replaced the topology without the CPUs being set up
    /// for it, and they still count as up: call `init` again before anything else.)
    pub fn init_with(
        &self,
        build: impl FnOnce(&mut Topology<CPUS>) -> Result<(), TopologyError>,
    ) -> Result<(), InitError> {
        self.smp.init_with(build)?;
        for c in &self.cpus {
            c.up.store(false, Ordering::Release);
            c.picked.store(false, Ordering::Release);
        }
        self.nr_up.store(0, Ordering::Release);
        Ok(())
    }

    /// Brings `cpu` up: its first pass through the scheduler, which makes it a CPU that
    /// placement can choose. Call it on the CPU itself, once after each `init`, before it
    /// takes work; called again it changes nothing (the CPU, the time and re-entry are still
    /// checked).
    pub fn cpu_up(&self, cpu: usize, now: u64) -> Result<(), SchedError> {
        let _inside = self.enter(cpu, Some(now))?;
        if self.cpus[cpu].up.load(Ordering::Acquire) {
            return Ok(());
        }
        self.smp.schedule(cpu, now)?;
        self.smp.finish_switch(cpu, now)?;
        self.cpus[cpu].up.store(true, Ordering::Release);
        self.nr_up.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// The timer interrupt on `cpu`. Returns whether `cpu` should call
    /// [`Scheduler::reschedule`] on its way out.
    pub fn tick(&self, cpu: usize, now: u64) -> Result<bool, SchedError> {
        let _inside = self.enter_up(cpu, Some(now))?;
        self.smp.tick(cpu, now)
    }

    /// Whether the core wants `cpu` to reschedule; ask on the way out of every interrupt and
    /// call. It answers `true` too when a request for `cpu` (or a nohz kick) reached the port
    /// on the way out of this very call. From a callback of `cpu`'s own call it is refused
    /// with [`SchedError::Reentered`]; for another CPU it answers.
    pub fn need_resched(&self, cpu: usize) -> Result<bool, SchedError> {
        let mut inside = self.enter_up(cpu, None)?;
        // Read after leaving: a request another CPU posted for this one meanwhile is
        // answered here, not left to a reschedule interrupt the port may skip for itself.
        let asked = inside.leave();
        Ok(asked || self.wants_pass(cpu))
    }

    /// Picks what `cpu` runs next and completes the switch, as often as the core asks (up to
    /// [`MAX_PASSES`]). The context of the task running until now must already be saved (an
    /// exception entry has saved it): it may run on another CPU as soon as this returns.
    /// `on_switch` sees each pass once it is complete; a task in its [`Switch::exited`] is
    /// gone and its thread can be freed (each exit is reported there exactly once). It runs
    /// inside this call: a scheduler call from it that enters `cpu` is refused with
    /// [`SchedError::Reentered`]; calls naming other CPUs run.
    /// A port that switches stacks inside the kernel uses [`Scheduler::pick`] and
    /// [`Scheduler::finish`] instead.
    pub fn reschedule(
        &self,
        cpu: usize,
        now: u64,
        mut on_switch: impl FnMut(&Switch<P::Payload>),
    ) -> Result<Resched<P::Payload>, SchedError> {
        let mut next = None;
        for _ in 0..MAX_PASSES {
            let mut inside = self.enter_up(cpu, Some(now))?;
            if self.cpus[cpu].picked.load(Ordering::Acquire) {
                return Err(SchedError::SwitchPending(cpu));
            }
            // (No switch is pending, so the pick finishes none and reports no exit itself.)
            let mut sw = self.smp.schedule_switch(cpu, now)?;
            sw.exited = self.smp.finish_switch(cpu, now)?;
            on_switch(&sw);
            next = sw.next;
            // Each pass ends the call, so what it posted for this CPU counts here.
            let asked = inside.leave();
            if !asked && !self.wants_pass(cpu) {
                return Ok(Resched { next, again: false });
            }
        }
        Ok(Resched { next, again: true })
    }

    /// The first half of a switch for ports that switch stacks inside the kernel (or must
    /// record the previous context between the halves): picks the next task. The previous
    /// one stays this CPU's until [`Scheduler::finish`], which the port calls once the
    /// previous context is saved; a second `pick` before it is refused
    /// ([`SchedError::SwitchPending`]).
    pub fn pick(&self, cpu: usize, now: u64) -> Result<Switch<P::Payload>, SchedError> {
        let _inside = self.enter_up(cpu, Some(now))?;
        if self.cpus[cpu].picked.swap(true, Ordering::AcqRel) {
            return Err(SchedError::SwitchPending(cpu));
        }
        let picked = self.smp.schedule_switch(cpu, now);
        if picked.is_err() {
            self.cpus[cpu].picked.store(false, Ordering::Release);
        }
        picked
    }

    /// The second half of a switch (see [`Scheduler::pick`]). Returns the task that exited
    /// with this switch, with its payload: it is gone, and its thread can be freed. Ask
    /// [`Scheduler::need_resched`] after it: the core may want another pick.
    pub fn finish(&self, cpu: usize, now: u64) -> Result<Option<(TaskId, P::Payload)>, SchedError> {
        let _inside = self.enter_up(cpu, Some(now))?;
        if !self.cpus[cpu].picked.load(Ordering::Acquire) {
            return Err(SchedError::NoSwitchPicked(cpu));
        }
        let finished = self.smp.finish_switch(cpu, now);
        if finished.is_ok() {
            self.cpus[cpu].picked.store(false, Ordering::Release);
        }
        finished
    }

    /// Creates a task on behalf of the task running on `cpu`, with the port's payload for it
    /// (its thread), which [`Scheduler::reschedule`] hands back when the task is picked.
    pub fn create(
        &self,
        cpu: usize,
        now: u64,
        params: TaskParams,
        payload: P::Payload,
    ) -> Result<TaskId, SchedError> {
        let _inside = self.enter_up(cpu, Some(now))?;
        self.all_up()?;
        self.smp.create_with(cpu, now, params, payload)
    }

    /// The task running on `cpu` blocks; it keeps the CPU until the next reschedule, which
    /// this requests.
    pub fn block(&self, cpu: usize, now: u64, id: TaskId) -> Result<(), SchedError> {
        let _inside = self.enter_up(cpu, Some(now))?;
        self.smp.block(cpu, now, id)
    }

    /// Wakes a blocked task from `cpu`. Returns the CPU it was placed on.
    pub fn wake(&self, cpu: usize, now: u64, id: TaskId) -> Result<usize, SchedError> {
        self.wake_with(cpu, now, id, WakeFlags::empty())
    }

    /// [`Scheduler::wake`] with hints: [`WakeFlags::SYNC`] when the waker is about to sleep
    /// (Linux's `wake_up_sync`, as a pipe's writer that then waits), so that the placement
    /// may put the wakee on the waker's CPU, counting that CPU's load without the waker's.
    ///
    /// ```
    /// use sched_core::port::Scheduler;
    /// use sched_core::{Features, NoPlatform, TaskParams, WakeFlags};
    /// static SCHED: Scheduler<NoPlatform, 2, 8, 8> = Scheduler::new(NoPlatform, Features::DEFAULT, 250);
    /// SCHED.init_with(|t| t.init_clusters(1, 2)).unwrap();
    /// (0..2).for_each(|cpu| SCHED.cpu_up(cpu, 1).unwrap());
    /// let t = SCHED.create(0, 1_000, TaskParams::default(), ()).unwrap();
    /// let cpu = SCHED.task_cpu(t).unwrap();
    /// SCHED.reschedule(cpu, 1_000, |_| {}).unwrap();
    /// SCHED.block(cpu, 2_000, t).unwrap();
    /// SCHED.reschedule(cpu, 2_000, |_| {}).unwrap();
    /// let on = SCHED.wake_with(0, 3_000, t, WakeFlags::SYNC).unwrap();
    /// assert_eq!(SCHED.task_cpu(t), Ok(on));
    /// ```
    pub fn wake_with(&self, cpu: usize, now: u64, id: TaskId, flags: WakeFlags) -> Result<usize, SchedError> {
        let _inside = self.enter_up(cpu, Some(now))?;
        self.all_up()?;
        self.smp.wake_with(cpu, now, id, flags)
    }

    /// A task exits (called from `cpu`). `true`: it is gone now (it was not running), and its
    /// thread can be freed. `false`: it was running or being switched away from; it leaves
    /// with the switch that finishes it on its CPU, which reports it ([`Switch::exited`] in
    /// [`Scheduler::reschedule`], or [`Scheduler::finish`]'s answer).
    pub fn exit(&self, cpu: usize, now: u64, id: TaskId) -> Result<bool, SchedError> {
        let _inside = self.enter_up(cpu, Some(now))?;
        self.smp.exit_now(now, id)
    }

    /// The task running on `cpu` yields once.
    pub fn yield_now(&self, cpu: usize, now: u64) -> Result<(), SchedError> {
        let _inside = self.enter_up(cpu, Some(now))?;
        self.smp.yield_now(cpu, now)
    }

    /// Changes a task's nice value (from `cpu`).
    pub fn set_nice(&self, cpu: usize, now: u64, id: TaskId, nice: i32) -> Result<(), SchedError> {
        let _inside = self.enter_up(cpu, Some(now))?;
        self.smp.set_nice(now, id, nice)
    }

    /// Sets a task's EEVDF slice in ns (from `cpu`; 0: the machine's default); see
    /// [`Smp::set_slice`].
    #[cfg(feature = "eevdf")]
    pub fn set_slice(&self, cpu: usize, now: u64, id: TaskId, ns: u64) -> Result<(), SchedError> {
        let _inside = self.enter_up(cpu, Some(now))?;
        self.smp.set_slice(now, id, ns)
    }

    /// Changes a task's allowed CPUs (from `cpu`); it moves if it must.
    pub fn set_affinity(&self, cpu: usize, now: u64, id: TaskId, mask: CpuMask) -> Result<(), SchedError> {
        let _inside = self.enter_up(cpu, Some(now))?;
        self.all_up()?;
        self.smp.set_affinity(now, id, mask)
    }

    /// `cpu` is about to idle. Returns whether the core now counts it as tickless: only then
    /// may the port stop its tick (the core balances on its behalf and kicks it when work
    /// appears). Always `false` without the `nohz` feature, and while a task group's
    /// bandwidth period timer runs (the tick runs it).
    pub fn idle_enter(&self, cpu: usize) -> Result<bool, SchedError> {
        let _inside = self.enter_up(cpu, None)?;
        // The tick runs the groups' period timers: while one runs, an idle CPU keeps ticking.
        #[cfg(feature = "groups")]
        if self.smp.bandwidth_timer().is_some() {
            return Ok(false);
        }
        #[cfg(feature = "nohz")]
        {
            self.smp.nohz_enter_idle(cpu)?;
            Ok(self.smp.nohz().is_tickless(cpu))
        }
        #[cfg(not(feature = "nohz"))]
        Ok(false)
    }

    /// The reschedule interrupt of a tickless CPU: carries out a pending nohz kick (the idle
    /// balance on behalf of every tickless CPU). Returns whether it balanced: a kick that finds
    /// this CPU busy again is dropped, as Linux drops it, and answers `false`. A balance may
    /// have pulled work here ([`Scheduler::need_resched`]). [`Scheduler::need_resched`] answers
    /// `true` while a kick is pending and [`Scheduler::reschedule`] serves it, so a port that
    /// reschedules when asked needs no more; this serves a kick without a switch. Always
    /// `false` without the `nohz` feature.
    pub fn serve_kick(&self, cpu: usize, now: u64) -> Result<bool, SchedError> {
        let _inside = self.enter_up(cpu, Some(now))?;
        #[cfg(feature = "nohz")]
        return self.smp.nohz_idle_balance(cpu, now);
        #[cfg(not(feature = "nohz"))]
        Ok(false)
    }

    /// An interrupt ended `cpu`'s idle period: it counts as busy again (restart its tick if
    /// [`Scheduler::idle_enter`] stopped it).
    pub fn idle_exit(&self, cpu: usize) -> Result<(), SchedError> {
        let _inside = self.enter_up(cpu, None)?;
        #[cfg(feature = "nohz")]
        self.smp.nohz_exit_idle(cpu)?;
        Ok(())
    }

    /// The payload of live task `id`.
    pub fn payload(&self, id: TaskId) -> Result<P::Payload, SchedError> {
        self.initialised()?;
        self.smp.table().payload(id)
    }

    /// The task running on `cpu` and its payload (`None`: idle). It reads the runqueue under
    /// its lock, which no callback runs under, so callbacks may ask too.
    pub fn current(&self, cpu: usize) -> Result<Option<(TaskId, P::Payload)>, SchedError> {
        self.port_cpu(cpu)?;
        self.is_up(cpu)?;
        let Some(id) = self.smp.current(cpu) else { return Ok(None) };
        // (A task that exits between the two reads is no longer current.)
        Ok(self.payload(id).ok().map(|p| (id, p)))
    }

    /// A task's state.
    pub fn state(&self, id: TaskId) -> Result<TaskState, SchedError> {
        self.smp.state(id)
    }

    /// The CPU a task is on (or last ran on).
    pub fn task_cpu(&self, id: TaskId) -> Result<usize, SchedError> {
        self.smp.task_cpu(id)
    }

    /// Live tasks.
    pub fn nr_tasks(&self) -> usize {
        self.smp.nr_tasks()
    }

    /// Checks every invariant of the machine (see [`Smp::check_invariants`]), from any
    /// context while other CPUs run: a task that a call under way is moving between
    /// runqueues is in flight, not lost. Before [`Scheduler::init`] there is no machine to
    /// check, which it reports as a violation (`what`: "not initialised").
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        if self.initialised().is_err() {
            return Err(InvariantViolation { cpu: 0, what: "not initialised", task: None });
        }
        self.smp.check_invariants_while(|| self.cpus.iter().any(|c| c.inside.load(Ordering::SeqCst)))
    }

    /// The platform.
    pub fn platform(&self) -> &P {
        self.smp.platform().inner()
    }

    /// Events dropped because [`EVENTS`](Scheduler) of them were already waiting for
    /// delivery (a trace that needs every event sizes `EVENTS` for its busiest call).
    pub fn events_lost(&self) -> u32 {
        self.smp.platform().events_lost()
    }

    /// The machine underneath, for experiments that reach into it (with the `internals`
    /// feature). Its calls bypass this facade's checks.
    #[cfg(feature = "internals")]
    pub fn smp(&self) -> &Smp<Deferred<P, CPUS, EVENTS, R>, CPUS, TASKS, Q, R, G> {
        &self.smp
    }

    /// Enters a call on `cpu` (at `now`, for the calls that take a time): the CPU exists,
    /// `now` is not 0, and the CPU is not inside another call.
    fn enter(&self, cpu: usize, now: Option<u64>) -> Result<Inside<'_, P, CPUS, EVENTS, R>, SchedError> {
        let state = self.port_cpu(cpu)?;
        if now == Some(0) {
            return Err(SchedError::ZeroTime);
        }
        if state.inside.swap(true, Ordering::Acquire) {
            return Err(SchedError::Reentered(cpu));
        }
        Ok(Inside { me: cpu, cpus: &self.cpus, deferred: self.smp.platform(), left: false })
    }

    /// [`Scheduler::enter`] on a CPU that is up.
    fn enter_up(&self, cpu: usize, now: Option<u64>) -> Result<Inside<'_, P, CPUS, EVENTS, R>, SchedError> {
        let inside = self.enter(cpu, now)?;
        self.is_up(cpu)?;
        Ok(inside)
    }

    /// [`SchedError::NotInitialised`] before the first `init`.
    fn initialised(&self) -> Result<(), SchedError> {
        self.smp.initialised()
    }

    /// The facade's state of `cpu`, a CPU of the machine `init` described.
    fn port_cpu(&self, cpu: usize) -> Result<&PortCpu, SchedError> {
        self.initialised()?;
        self.cpus.get(cpu).filter(|_| cpu < self.smp.nr_cpus()).ok_or(SchedError::CpuOutOfRange(cpu))
    }

    /// [`SchedError::CpuNotUp`] unless `cpu` (in range) has been brought up.
    fn is_up(&self, cpu: usize) -> Result<(), SchedError> {
        if !self.cpus[cpu].up.load(Ordering::Acquire) {
            return Err(SchedError::CpuNotUp(cpu));
        }
        Ok(())
    }

    /// The core wants `cpu` to pass through the scheduler: a reschedule is due, or a nohz kick
    /// waits there (a pass serves it first). A kick can reach its CPU at the end of the
    /// CPU's own call (see [`Deferred`]), when no interrupt will come for it; counting it
    /// here keeps it from waiting, unserved and blocking every later kick, while the CPU
    /// sleeps without a tick.
    fn wants_pass(&self, cpu: usize) -> bool {
        #[cfg(feature = "nohz")]
        if self.smp.nohz().kick_flags(cpu) != 0 {
            return true;
        }
        self.smp.need_resched(cpu)
    }

    /// Every CPU of the machine is up: one load on the way that succeeds (create and wake);
    /// the CPUs are searched only to name the first one missing.
    fn all_up(&self) -> Result<(), SchedError> {
        let n = self.smp.nr_cpus();
        if self.nr_up.load(Ordering::Acquire) as usize == n {
            return Ok(());
        }
        match (0..n).find(|&c| !self.cpus[c].up.load(Ordering::Acquire)) {
            Some(c) => Err(SchedError::CpuNotUp(c)),
            None => Ok(()),
        }
    }
}

impl<
        P: Platform,
        const CPUS: usize,
        const TASKS: usize,
        const Q: usize,
        R: RelaxStrategy,
        const EVENTS: usize,
        const G: usize,
    > Scheduler<P, CPUS, TASKS, Q, R, EVENTS, G>
{
    // What a port reads back (the types are `report.rs`'s).

    /// A copy of a CPU's published figures (lock-free; any context, callbacks included).
    /// A CPU the machine does not have is [`SchedError::CpuOutOfRange`].
    pub fn stats(&self, cpu: usize) -> Result<CpuStats, SchedError> {
        self.port_cpu(cpu)?;
        Ok(CpuStats::of(self.smp.stats(cpu)))
    }

    /// Where a CPU's load balancing stands. On a target without 64-bit atomics it takes that
    /// CPU's balance lock briefly (a call naming a CPU inside a balance pass waits for the
    /// pass, which calls back with no lock held, so a callback's call returns).
    pub fn balance_report(&self, cpu: usize) -> Result<BalanceReport, SchedError> {
        self.port_cpu(cpu)?;
        let next_balance = self.smp.next_balance_of(cpu)?;
        #[cfg(feature = "nohz")]
        let (tickless, kick_pending) =
            (self.smp.nohz().is_tickless(cpu), self.smp.nohz().kick_flags(cpu) != 0);
        #[cfg(not(feature = "nohz"))]
        let (tickless, kick_pending) = (false, false);
        Ok(BalanceReport { next_balance, tickless, kick_pending })
    }
}
