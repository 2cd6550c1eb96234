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
//! A kernel hosts the core through [`port::Scheduler`], the porter's API over [`Smp`] that
//! refuses calls breaking the calling contract; PORTING.md (at the repository's root) states
//! that contract per call, and `examples/toy_port.rs` is a complete 2-CPU host. Underneath:
//!
//! A platform (a kernel, the simulator, a test) owns one [`Smp`] for the whole machine,
//! builds its topology with [`Smp::init`] (or a preset through [`Smp::init_with`]), and calls
//! it from every CPU with the current time in ns: [`Smp::create`], [`Smp::block`],
//! [`Smp::wake`], [`Smp::exit`], [`Smp::tick`] (returns whether to reschedule; runs the load
//! balancer when due), [`Smp::schedule`] (picks what to run) followed by
//! [`Smp::finish_switch`] once the previous task's context is saved, [`Smp::yield_now`],
//! [`Smp::set_nice`], [`Smp::set_affinity`], and for tickless idle [`Smp::nohz_enter_idle`],
//! [`Smp::nohz_exit_idle`] and [`Smp::nohz_idle_balance`]. It implements [`Platform`] to
//! receive reschedule requests, stopper and nohz kicks, and [`Event`]s. Every call
//! validates its input first and returns a [`SchedError`] without changing anything on bad
//! input; [`Smp::check_invariants`] verifies the whole state. A uniprocessor platform can
//! use [`SingleCpu`], the same machinery with one CPU behind a smaller API. The contract a
//! port must keep (who calls what and when, under which locks callbacks run) is in
//! PORTING.md; the lock order is in [`smp`].
//!
//! A port needs only the modules public by default (`port`, `platform`, `smp`,
//! `single_cpu`, `topology`, `task`, `features`, `error`, `cpumask`, `weights`). The machinery
//! under them — the modules `balance`, `capacity`, `entities`, `fair`, `pelt`, `placement`,
//! `runqueue`, `table` and `timeline`, and their types at the root — is public only with the
//! `internals` feature, which the simulator and the tests turn on.
//!
//! ```
//! use sched_core::{Features, NoPlatform, Smp, TaskParams};
//! let smp: Box<Smp<NoPlatform, 4, 64, 64>> = Box::new(Smp::new(NoPlatform, Features::default(), 250));
//! smp.init_with(|t| t.init_clusters(1, 4)).unwrap();
//! // Every CPU passes through the scheduler once before it takes work.
//! for cpu in 0..4 {
//!     smp.schedule(cpu, 1).unwrap();
//!     smp.finish_switch(cpu, 1).unwrap();
//! }
//! let t = smp.create(0, 1_000, TaskParams { nice: 5, ..TaskParams::default() }).unwrap();
//! let cpu = smp.task_cpu(t).unwrap() as usize;
//! assert_eq!(smp.schedule(cpu, 1_000).unwrap(), Some(t));
//! smp.finish_switch(cpu, 1_000).unwrap();
//! smp.block(cpu, 2_000_000, t).unwrap();
//! assert_eq!(smp.schedule(cpu, 2_000_000).unwrap(), None); // idle
//! smp.finish_switch(cpu, 2_000_000).unwrap();
//! smp.wake(0, 9_000_000, t).unwrap();
//! smp.check_invariants().unwrap();
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

// The porter's surface: what a kernel names to host the core.
pub mod cpumask;
/// EEVDF's arithmetic: the average vruntime kept incrementally, eligibility, lag, placement,
/// deadlines and slices (the second fair policy, built in with the `eevdf` feature).
#[cfg(feature = "eevdf")]
pub mod eevdf;
pub mod error;
pub mod features;
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
            #[cfg(not(feature = "internals"))]
            mod $name;
        )*
    };
}

internal_modules!(balance, capacity, entities, fair, pelt, placement, runqueue, table, timeline);

/// The atomics of the published per-CPU figures ([`smp::RqStats`]) are portable-atomic's, so
/// the core builds for targets without 64-bit atomics or without compare-and-swap; on
/// targets that have them they are the standard ones.
pub use portable_atomic;

// What the porter's surface hands out from the machinery: the balancer's reports (in
// `EventKind::Balance`) and what `check_invariants` answers.
pub use balance::{BalanceRecord, IdleType, Outcome, Round};
pub use runqueue::InvariantViolation;

pub use cpumask::{CpuMask, MAX_CPUS};
pub use error::{InitError, SchedError};
pub use features::{Features, RunnableInit, TunableScaling, Tunables, UnknownFeature};
pub use platform::{Event, EventKind, MigrateReason, NoPlatform, Platform, TaskPayload};
pub use single_cpu::SingleCpu;
pub use smp::{Smp, Switch};
pub use task::{Entity, Policy, TaskId, TaskParams, TaskState};
pub use topology::{Topology, TopologyDesc, TopologyError};
pub use weights::{LoadWeight, Nice};

#[cfg(feature = "internals")]
pub use entities::{Entities, EntityCell, Pool};
#[cfg(feature = "internals")]
pub use fair::{DequeueFlags, EnqueueFlags, Fair, WakeFlags};
#[cfg(feature = "internals")]
pub use runqueue::{RunQueue, SlotId};
#[cfg(feature = "internals")]
pub use table::{Location, TaskEntry, TaskTable};
#[cfg(feature = "internals")]
pub use timeline::Timeline;
