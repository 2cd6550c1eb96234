//! # sched-core: a fair-class scheduler core
//!
//! A `no_std`, allocation-free implementation of the behaviour of Linux's CFS (v5.7): tasks
//! are ordered by *virtual runtime* on a per-CPU timeline, load is tracked per entity with
//! fixed-point PELT, and a set of run-time [`Features`] switches selects behaviours — among
//! them the seed patch's rule for the load balancer ([`Features::UTIL_PULL_SKIPS_LONE_TASK`]).
//!
//! ## The model, for a porter
//!
//! * **Tasks and entities.** A task is named by a [`TaskId`] (a table slot plus a
//!   generation, so a recycled slot never answers to an old id). Its scheduling state is an
//!   [`Entity`]: weight (from [`Nice`] via the 40-entry table), vruntime, runtime accounting
//!   and PELT signals.
//! * **The timeline.** Runnable tasks that are not running wait on their CPU's
//!   `Timeline`, ordered by vruntime (wrap-safe). The running task is not on it. A task's
//!   vruntime advances by `wall time × 1024 / weight`; the leftmost task is the one that has
//!   had the least of its fair share. `min_vruntime` follows the timeline and never goes
//!   back; new and waking tasks are placed relative to it.
//! * **Preemption.** The tick preempts a task that used its slice (its weight's share of the
//!   24 ms latency on 8 CPUs) or ran too far ahead; a waking task preempts one that is more
//!   than the wakeup granularity ahead of it.
//! * **PELT** (`pelt`): each task and runqueue keeps geometric sums of its runnable,
//!   running and weighted time (half-life 32 ms) and averages `load_avg`, `runnable_avg`,
//!   `util_avg` in 0..1024 units of capacity; `util_est` remembers a task's utilisation across
//!   sleeps. The load balancer of the SMP layer decides with these signals.
//! * **Ownership.** Every task's entity lives in one cell of the machine's `Entities`,
//!   stored once for its whole life. While the task is queued or running on a CPU it is
//!   attached to that CPU's `RunQueue` (a slot with its id and links), and whoever holds
//!   the runqueue owns its entity; asleep, the `TaskTable` (its lock) owns it.
//!
//! ## Driving it
//!
//! A kernel hosts the core through [`port::Scheduler`], the porter's API: a `static` built
//! with [`port::Scheduler::new`], [`init`](port::Scheduler::init) once with the machine's
//! topology, [`cpu_up`](port::Scheduler::cpu_up) on each CPU, and then, from every CPU with
//! the current time in ns: `tick` from the timer interrupt, `reschedule` (or `pick` and
//! `finish` around a context switch) when `need_resched` says so, the task's calls
//! (`create`, `block`, `wake`, `exit`, `yield_now`, `set_nice`, `set_affinity`), and for
//! tickless idle `idle_enter` and `idle_exit`. It implements [`Platform`] to receive
//! reschedule requests, stopper and nohz kicks, and [`Event`]s, delivered after the core's
//! locks are released. Every call checks its input and the calling contract and returns a
//! [`SchedError`] without changing anything when either is broken;
//! [`check_invariants`](port::Scheduler::check_invariants) verifies the whole state, and
//! [`stats`](port::Scheduler::stats) reads a CPU's figures back. A CPU id is a `usize`
//! everywhere. PORTING.md (at the repository's root) states the contract per call, and
//! `examples/` holds a small toy port and a worked port of four CPUs as threads.
//!
//! A uniprocessor platform can use [`SingleCpu`], the same machinery with one CPU behind a
//! smaller API.
//!
//! A port needs only the modules public by default (`port`, `platform`, `smp`,
//! `single_cpu`, `topology`, `task`, `features`, `error`, `cpumask`, `weights`, `locks`, and
//! `eevdf` and `group` with their features). The machinery
//! under them — the modules `balance`, `capacity`, `entities`, `fair`, `pelt`, `placement`,
//! `runqueue`, `table` and `timeline`, their types at the root, and [`Smp`]'s views into its
//! per-CPU state — is public only with the `internals` feature, which the simulator and the
//! tests turn on.
//!
//! ```
//! use sched_core::port::Scheduler;
//! use sched_core::{Features, NoPlatform, Switch, TaskParams, TaskState};
//! // 4 CPUs, room for 64 tasks, 64 runnable per CPU; HZ 250.
//! static SCHED: Scheduler<NoPlatform, 4, 64, 64> = Scheduler::new(NoPlatform, Features::DEFAULT, 250);
//! SCHED.init_with(|t| t.init_clusters(1, 4)).unwrap();
//! for cpu in 0..4 {
//!     SCHED.cpu_up(cpu, 1).unwrap();
//! }
//! // Each pass of a reschedule: a task whose exit it completed is gone, its thread freed here.
//! let on_switch = |sw: &Switch<()>| {
//!     if let Some((_gone, ())) = sw.exited { /* free that thread's stack */ }
//! };
//! // The port's payload (here `()`) comes back with the task to run.
//! let t = SCHED.create(0, 1_000, TaskParams { nice: 5, ..TaskParams::default() }, ()).unwrap();
//! let cpu = SCHED.task_cpu(t).unwrap();
//! assert_eq!(SCHED.reschedule(cpu, 1_000, on_switch).unwrap().next, Some((t, ())));
//! // The task sleeps: its CPU idles.
//! SCHED.block(cpu, 2_000_000, t).unwrap();
//! assert_eq!(SCHED.reschedule(cpu, 2_000_000, on_switch).unwrap().next, None);
//! // A wakeup from CPU 0 places it again.
//! let woke_on = SCHED.wake(0, 9_000_000, t).unwrap();
//! assert_eq!(SCHED.state(t), Ok(TaskState::Runnable));
//! assert!(SCHED.need_resched(woke_on).unwrap());
//! SCHED.check_invariants().unwrap();
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

/// Marks a method of the machinery under the porter's surface: public with the `internals`
/// feature, visible only inside the crate otherwise (the port's facade is built on it).
/// (Its documentation, examples included, goes with the public one only.)
macro_rules! internal {
    ($(#[doc = $doc:expr])* pub fn $($rest:tt)*) => {
        #[cfg(feature = "internals")]
        $(#[doc = $doc])* pub fn $($rest)*
        #[cfg(not(feature = "internals"))]
        #[allow(dead_code)]
        pub(crate) fn $($rest)*
    };
}

// The porter's surface: what a kernel names to host the core.
pub mod cpumask;
/// EEVDF's arithmetic: the average vruntime kept incrementally, eligibility, lag, placement,
/// deadlines and slices (the second fair policy, built in with the `eevdf` feature).
#[cfg(feature = "eevdf")]
pub mod eevdf;
pub mod error;
pub mod features;
#[cfg(feature = "groups")]
pub mod group;
mod limits;
// Prefetch hints (`Smp::cpu_lines`), for the simulator and experiments.
#[cfg(all(any(feature = "internals", test), target_pointer_width = "64"))]
mod lines;
pub mod locks;
pub mod platform;
pub mod port;
mod relaxed;
pub mod single_cpu;
pub mod smp;
pub mod task;
pub mod topology;
pub mod weights;

/// The machinery under the porter's surface: public with the `internals` feature (for the
/// simulator, the tests and experiments that reach into the machine), private otherwise, so
/// a port sees only what it hosts the core with.
macro_rules! internal_modules {
    ($($name:ident),* $(,)?) => {
        $(
            #[cfg(feature = "internals")]
            pub mod $name;
            // (Their API is the experiments': unused by the facade is not dead. Their doc
            // examples open with a fence that is `ignore` without the feature, where the
            // items they call are private.)
            #[cfg(not(feature = "internals"))]
            #[allow(dead_code)]
            mod $name;
        )*
    };
}

/// The crate README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

internal_modules!(balance, capacity, entities, fair, pelt, placement, runqueue, table, timeline);

/// The atomics of the published per-CPU figures (`smp::RqStats`) are portable-atomic's, so
/// the core builds for targets without 64-bit atomics or without compare-and-swap; on
/// targets that have them they are the standard ones.
#[cfg(feature = "internals")]
pub use portable_atomic;
/// The spin locks' crate: each of its relax strategies is a machine's lock parameter `R`
/// ([`locks::Locks`]; default `spin::Spin`), named when a later parameter (`G`, the task
/// groups) is given.
pub use spin;

// What the porter's surface hands out from the machinery, or takes: the balancer's reports
// (in `EventKind::Balance`), what `check_invariants` answers and the hints of a wakeup
// (`wake_with`).
pub use balance::{BalanceRecord, GroupType, IdleType, MigrationType, Outcome, Round};
pub use fair::WakeFlags;
pub use runqueue::InvariantViolation;

pub use cpumask::{CpuMask, MAX_CPUS};
pub use error::{GroupError, InitError, SchedError};
pub use features::{FeatureListError, Features, RunnableInit, TunableScaling, Tunables, UnknownFeature};
pub use platform::{Event, EventKind, MigrateReason, NoPlatform, Platform, TaskPayload};
pub use single_cpu::SingleCpu;
pub use smp::{Smp, Switch};
pub use task::{Entity, Policy, TaskId, TaskParams, TaskState};
pub use topology::{Topology, TopologyDesc, TopologyError};
pub use weights::{LoadWeight, Nice};

#[cfg(feature = "internals")]
pub use entities::{Entities, EntityCell, Pool};
#[cfg(feature = "internals")]
pub use fair::{DequeueFlags, EnqueueFlags, Fair};
#[cfg(feature = "internals")]
pub use runqueue::{RunQueue, SlotId};
#[cfg(feature = "internals")]
pub use table::{Location, TaskEntry, TaskTable};
#[cfg(feature = "internals")]
pub use timeline::Timeline;
