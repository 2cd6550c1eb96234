//! The SMP scheduler: one `RunQueue` per CPU, each behind its own lock, the task table, the
//! topology, and the shared state the load balancer reads.
//!
//! ## Lock order (the one place it is written down)
//!
//! 0. With the `groups` feature, the **group configuration** lock (`Smp::group_config`):
//!    taken first, with no other lock held, by the calls that create, configure or delete a
//!    group and by a setup's `regroup`, and held while they walk the CPUs. The invariant
//!    checker only tries it, holding the locks below (and skips the group checks if it is
//!    taken).
//! 1. A CPU's **balance-state** lock (`CpuCell::balance`): held by whoever balances on
//!    that CPU's behalf (the CPU itself, or a nohz idle balancer), never while holding (2)
//!    or (3).
//! 2. **Runqueue** locks: at most two at once, and then the lower-numbered CPU first.
//! 3. The **task table** lock: taken with or without runqueue locks, never held while
//!    taking a runqueue lock.
//!
//! 4. The porter's **event queue** (`port::Deferred`): a leaf, taken with or without the
//!    locks above and released before anything else is locked or called.
//! 5. With the `groups` feature, the **group table** (`Smp::groups`) and each group's
//!    **bandwidth pool** (`GroupShared::bw`): leaves too, taken with or without a runqueue
//!    lock and released before anything else is locked.
//!
//! An **entity cell** (the `entities` module) is not a lock: only the entity's owner reads
//! or writes it — the holder of the runqueue lock of the CPU the task is attached to, of the
//! table lock for a parked task, or the caller moving a task in transit — and that owner's
//! lock orders the cell's relaxed accesses.
//!
//! The topology is written by [`Smp::init`] before any other call (and again only while no task
//! is alive) and only read otherwise. Its write lock is taken with no other lock held, and on
//! two CPUs or more nothing is locked under it; a read of it may be taken under any lock.
//!
//! The kind of lock is the parameter `R` ([`Locks`]). A spin relax strategy is one: the
//! locks then spin with it (the default, [`spin::Spin`], with `core::hint::spin_loop()`), and
//! a platform can supply its own, e.g. one that executes aarch64 `yield` so a spinning vCPU
//! hands its slot to the lock holder under QEMU's icount mode. A host that drives every CPU
//! from one thread may pass locks that take no atomic instruction (the simulator does).
//!
//! ## Read without a lock
//!
//! Each runqueue's owner publishes a few figures (`RqStats`: task counts, PELT averages,
//! capacity, misfit load, idleness) into atomics at the end of every operation under its lock.
//! The balancer reads other CPUs' figures from there without locking, as Linux reads remote
//! runqueues unlocked: a figure may be one operation old, which only makes a decision a
//! little stale — every move is re-validated under the runqueue locks before it happens.
//! A port reads a copy of them with [`crate::port::Scheduler::stats`].
//!
//! ## What never moves
//!
//! A task marked `on_cpu` (running, or still being switched away from because its CPU has
//! not called [`Smp::finish_switch`]) is never migrated: its context may not be saved yet.
//! A blocked task still `on_cpu` is woken in place, on its own CPU.

mod active;
#[cfg(feature = "groups")]
mod groups;
mod invariants;
mod lifecycle;
mod load_balance;
mod migration;
mod nohz;
mod nohz_state;
mod percpu;
mod placement;
#[cfg(all(any(feature = "internals", test), target_pointer_width = "64"))]
mod prefetch;
mod rebalance;
mod switch;
#[cfg(any(test, feature = "testing"))]
mod testing;
mod wakeup;

#[cfg(not(feature = "internals"))]
pub(crate) use nohz_state::Nohz;
#[cfg(feature = "internals")]
pub use nohz_state::{Nohz, NOHZ_BALANCE_KICK, NOHZ_STATS_KICK};
#[cfg(feature = "internals")]
pub use percpu::{BalanceState, CpuCell, CpuState, DomainBalance, GroupCapacity, Push, RootDomain, RqStats};
#[cfg(not(feature = "internals"))]
pub(crate) use percpu::{
    BalanceState, CpuCell, CpuState, DomainBalance, GroupCapacity, Push, RootDomain, RqStats,
};

/// What one [`Smp::schedule_switch`] did on a CPU, with the platform's payloads (`T`) read
/// under the lock that holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switch<T> {
    /// The task switched away from, the state it was left in, and its payload; `None` when
    /// no task was switched out (the CPU was idle, or the same task goes on). `Exiting` only
    /// says it is on its way out: its exit is reported once, by the switch that finishes it
    /// (`exited`, or [`Smp::finish_switch`]'s answer).
    pub prev: Option<(TaskId, TaskState, T)>,
    /// The task to run and its payload; `None`: idle.
    pub next: Option<(TaskId, T)>,
    /// A task whose exit completed with this switch: gone now, its thread can be freed. From
    /// [`Smp::schedule_switch`], one switched away from by an earlier `schedule` left
    /// unfinished, which this call finished; in `port::Scheduler::reschedule`'s `on_switch`,
    /// the one this pass's finish removed.
    pub exited: Option<(TaskId, T)>,
}

/// How [`Smp`]'s `move_queued_task` places a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Move {
    /// Into a free slot, setting the task's affinity to the mask in the same step.
    Reaffine(CpuMask),
    /// Into the slot reserved for it at the destination.
    Reserved,
}

/// What `move_queued_task` came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Moved {
    /// The task moved.
    Yes,
    /// The destination had no room; nothing changed.
    NoRoom,
    /// The task was no longer queued there, or may not run at the destination; nothing
    /// changed.
    Changed,
}

use portable_atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};

use spin::Spin;

use crate::locks::{Locks, Mutex, MutexGuard, RwLock, RwLockReadGuard};

pub use crate::limits::{DEFAULT_HZ, MAX_HZ, SYSCTL_MIGRATION_COST_NS};

use crate::cpumask::CpuMask;
use crate::entities::{Entities, Pool};
use crate::error::{InitError, SchedError};
use crate::features::{Features, Tunables};
use crate::limits::MAX_LEVELS;
use crate::platform::{Event, EventKind, Platform};
use crate::relaxed::Slot;
use crate::table::{Location, TaskTable};
use crate::task::{Entity, TaskId, TaskState};
use crate::topology::{Group, Topology, TopologyDesc, TopologyError};
use crate::weights::saturate_u32;
use nohz_state::NOHZ;

/// The scheduler of a whole machine of up to `CPUS` CPUs, `TASKS` live tasks and `Q`
/// runnable tasks per CPU.
///
/// Every method takes `&self`: CPUs call it concurrently, each passing its own number as
/// `cpu` for the operations that act "on this CPU" (tick, schedule, finish_switch, yield,
/// create's parent, wake's waker).
///
/// ```
/// use sched_core::{NoPlatform, Smp, Features, TaskParams};
/// use sched_core::topology::Topology;
/// let smp: Box<Smp<NoPlatform, 8, 64, 64>> = Box::new(Smp::new(NoPlatform, Features::default(), 250));
/// smp.init_with(|t| t.init_clusters(2, 4)).unwrap();
/// let t = smp.create(0, 0, TaskParams::default()).unwrap();
/// assert_eq!(smp.schedule(0, 0).unwrap(), Some(t));
/// smp.finish_switch(0, 0).unwrap();
/// smp.check_invariants().unwrap();
/// ```
pub struct Smp<
    P: Platform,
    const CPUS: usize,
    const TASKS: usize,
    const Q: usize,
    R: Locks = Spin,
    const G: usize = 0,
> {
    pub(crate) platform: P,
    pub(crate) topo: RwLock<R, Topology<CPUS>>,
    pub(crate) cpus: [CpuCell<Q, R, G>; CPUS],
    pub(crate) tasks: Mutex<R, TaskTable<TASKS, P::Payload>>,
    /// Every task's entity, in the cell of its table slot (see [`crate::entities`]).
    pub(crate) ents: Entities<TASKS>,
    pub(crate) sgc: [[GroupCapacity; CPUS]; MAX_LEVELS],
    pub(crate) root: RootDomain,
    nr_cpus: AtomicU32,
    /// The feature bits XOR the defaults (0 = the defaults), so a machine built with the
    /// defaults is all zeros.
    features: AtomicU32,
    /// HZ, 0 standing for [`DEFAULT_HZ`] (for the same reason).
    hz: AtomicU32,
    /// Per LLC (indexed by its first CPU): average cost of an idle-CPU scan (ns; 32 bits,
    /// native on every target, saturating).
    pub(crate) llc_scan_cost: [AtomicU32; CPUS],
    /// nohz idle-balancing state.
    pub(crate) nohz: Nohz<CPUS>,
    /// Each CPU's entity of each group (CPU `c`, group slot `g`: `[c][g - 1]`).
    #[cfg(feature = "groups")]
    pub(crate) gcells: [[crate::entities::EntityCell; G]; CPUS],
    /// What the CPUs share of each group.
    #[cfg(feature = "groups")]
    pub(crate) gshared: [crate::group::shared::GroupShared; G],
    /// The group table (a leaf lock: see `groups.rs`).
    #[cfg(feature = "groups")]
    pub(crate) groups: Mutex<R, crate::group::tree::Groups<G>>,
    /// Serialises the group configuration calls, so that one never meets a group another
    /// is deleting, nor a slot another is reusing (first in the lock order).
    #[cfg(feature = "groups")]
    pub(crate) group_config: Mutex<R, ()>,
    /// Whether any group was ever given a quota: until then the tick has no period timer
    /// to look at.
    #[cfg(feature = "groups")]
    pub(crate) bandwidth_used: core::sync::atomic::AtomicBool,
    /// Whether the CPUs publish [`RqStats::first_queued`] for prefetching
    /// ([`Smp::set_prefetch_hints`]).
    #[cfg(all(any(feature = "internals", test), target_pointer_width = "64"))]
    pub(crate) prefetch_hints: AtomicBool,
}

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: Locks, const G: usize>
    Smp<P, CPUS, TASKS, Q, R, G>
{
    /// A machine with no CPUs yet; call [`Smp::init`] (or [`Smp::init_with`]) next. `const`
    /// so a kernel can place it in a static and initialise it in place. With the default
    /// features and [`DEFAULT_HZ`] (and a platform of zeros, such as a unit struct) the
    /// machine is all zeros, so a `static` costs no `.data` (no copy in flash): every CPU's
    /// real initial state is written by `init`, and other features or HZ can be set at boot
    /// with [`Smp::set_features`] and [`Smp::set_hz`].
    ///
    /// ```
    /// use sched_core::{NoPlatform, Smp, Features, TaskParams};
    /// static SMP: Smp<NoPlatform, 2, 16, 16> = Smp::new(NoPlatform, Features::DEFAULT, 250);
    /// SMP.init_with(|t| t.init_flat(2)).unwrap();
    /// let t = SMP.create(0, 0, TaskParams::default()).unwrap();
    /// assert_eq!(SMP.schedule(0, 0).unwrap(), Some(t));
    /// ```
    pub const fn new(platform: P, features: Features, hz: u32) -> Self {
        // The task table records CPUs and runqueue slots in 16 bits.
        const { assert!(CPUS <= 1 << 16 && Q <= 1 << 16, "at most 65536 CPUs and 65536 slots per runqueue") };
        #[cfg(not(feature = "groups"))]
        const {
            assert!(G == 0, "task groups need the `groups` feature")
        };
        #[cfg(feature = "groups")]
        const {
            assert!(G < Q, "each CPU's group entities take G of its Q slots, and tasks need one")
        };
        Smp {
            platform,
            topo: lock_api::RwLock::new(Topology::empty()),
            cpus: [const {
                CpuCell {
                    // Zeros until `init` gives each CPU of the topology a fresh state.
                    rq: lock_api::Mutex::new(CpuState::UNSET),
                    stats: RqStats::new(),
                    balance: lock_api::Mutex::new(BalanceState {
                        domains: [DomainBalance {
                            balance_interval_ms: 0,
                            nr_balance_failed: 0,
                            last_balance: 0,
                            max_newidle_lb_cost: 0,
                            next_decay_max_lb_cost: 0,
                        }; MAX_LEVELS],
                    }),
                    next_balance: crate::relaxed::Word64::new(0),
                }
            }; CPUS],
            tasks: lock_api::Mutex::new(TaskTable::new()),
            ents: Entities::new(),
            sgc: [const { [const { GroupCapacity::new() }; CPUS] }; MAX_LEVELS],
            root: RootDomain { overload: AtomicBool::new(false), overutilized: AtomicBool::new(false) },
            nr_cpus: AtomicU32::new(0),
            features: AtomicU32::new(features.bits() ^ Features::DEFAULT.bits()),
            hz: AtomicU32::new(if hz == DEFAULT_HZ { 0 } else { hz }),
            llc_scan_cost: [const { AtomicU32::new(0) }; CPUS],
            nohz: Nohz::new(),
            #[cfg(feature = "groups")]
            gcells: [const { [const { crate::entities::EntityCell::new() }; G] }; CPUS],
            #[cfg(feature = "groups")]
            gshared: [const { crate::group::shared::GroupShared::new() }; G],
            #[cfg(feature = "groups")]
            groups: lock_api::Mutex::new(crate::group::tree::Groups::new()),
            #[cfg(feature = "groups")]
            group_config: lock_api::Mutex::new(()),
            #[cfg(feature = "groups")]
            bandwidth_used: core::sync::atomic::AtomicBool::new(false),
            #[cfg(all(any(feature = "internals", test), target_pointer_width = "64"))]
            prefetch_hints: AtomicBool::new(false),
        }
    }

    /// Builds the topology from a description and sets every CPU up: capacities, tunables
    /// scaled for the CPU count, balance intervals. Call before anything else; it may be
    /// called again only while no task is alive. Refuses (changing nothing) a refused
    /// description, a tick rate above [`MAX_HZ`], or live tasks.
    pub fn init(&self, desc: &TopologyDesc) -> Result<(), InitError> {
        self.init_with(|t| t.init(desc))
    }

    /// Like [`Smp::init`] with one of the topology presets, e.g.
    /// `smp.init_with(|t| t.init_clusters(2, 4))`. A builder of [`Topology`] checks before it
    /// writes, so a refused one changes nothing; `build` must return the builder's result as
    /// it is. (A closure that builds and then returns an error of its own has replaced the
    /// topology without the CPUs being set up for it: call `init` again before anything else.)
    pub fn init_with(
        &self,
        build: impl FnOnce(&mut Topology<CPUS>) -> Result<(), TopologyError>,
    ) -> Result<(), InitError> {
        check_hz(self.hz())?;
        // (init runs before the CPUs do; a task created concurrently is a misuse it does not
        // guard against, since the table lock may not be held while runqueues are locked.)
        let alive = self.table().len();
        if alive > 0 {
            return Err(InitError::TasksAlive(alive));
        }
        // The topology is written with no other lock held, and the CPUs set up under a read of
        // it: a balance pass reads it under its CPU's balance-state lock, so a writer that
        // took that lock would deadlock with an idle CPU balancing meanwhile. (One CPU has no
        // other to balance: its image keeps the write, and no read path.)
        let mut written = self.topo.write();
        build(&mut written)?;
        if CPUS > 1 {
            drop(written);
            self.set_up_cpus(&self.topology());
        } else {
            self.set_up_cpus(&written);
            drop(written);
        }
        #[cfg(feature = "groups")]
        if G > 0 {
            self.regroup();
        }
        Ok(())
    }

    /// [`Smp::init_with`]'s second half: every CPU of the new topology set up afresh.
    fn set_up_cpus(&self, topo: &Topology<CPUS>) {
        let n = topo.nr_cpus();
        let tunables = Tunables::for_cpus(n);
        let features = self.features();
        for cpu in 0..n {
            let cap = topo.capacity_orig(cpu);
            // (The balance state first, then the runqueue: the lock order above.)
            let mut b = self.bal(cpu);
            let mut st = self.rq(cpu);
            st.reset(cpu as u32, cap, tunables, features);
            #[cfg(feature = "eevdf")]
            {
                st.rq.tick_ns = self.tick_ns();
            }
            st.asym_capacity = topo.asym_cpucapacity_level(cpu).is_some();
            self.cpus[cpu].stats.publish(&st);
            drop(st);
            *b = BalanceState::default();
            for (i, d) in topo.domains(cpu).enumerate() {
                b.domains[i].balance_interval_ms = d.balance_interval_ms;
            }
        }
        self.for_each_group(topo, |g, sgc| {
            sgc.capacity.store(saturate_u32(g.capacity), Relaxed);
            sgc.min_capacity.store(saturate_u32(g.min_capacity), Relaxed);
            sgc.max_capacity.store(saturate_u32(g.max_capacity), Relaxed);
        });
        // A machine set up anew has no tickless CPU, and counts its LLCs' busy CPUs afresh.
        if CPUS > 1 && NOHZ {
            self.nohz.reset();
        }
        self.nr_cpus.store(n as u32, Relaxed);
    }

    /// Calls `f` with every sched group of every CPU's domains in `topo` and the group's
    /// capacity record (a group that several CPUs' domains hold comes once for each). A
    /// machine of one CPU has no domains, hence no groups; `CPUS == 1` is a constant, so its
    /// image leaves the walk out.
    fn for_each_group(&self, topo: &Topology<CPUS>, mut f: impl FnMut(&Group, &GroupCapacity)) {
        if CPUS == 1 {
            return;
        }
        for cpu in 0..topo.nr_cpus() {
            for lvl in 0..topo.nr_levels(cpu) {
                for g in topo.groups(cpu, lvl) {
                    f(g, self.sgc_of(g.id));
                }
            }
        }
    }

    /// The capacity record of the group whose [`Group::id`] is `group_id` (an id past the
    /// table's last level is clamped to it rather than panic).
    pub(crate) fn sgc_of(&self, group_id: usize) -> &GroupCapacity {
        let (l, i) = (group_id / CPUS, group_id % CPUS);
        &self.sgc[l.min(MAX_LEVELS - 1)][i]
    }

    /// The platform.
    pub fn platform(&self) -> &P {
        &self.platform
    }

    /// Number of CPUs (0 before `init`).
    pub fn nr_cpus(&self) -> usize {
        self.nr_cpus.load(Relaxed) as usize
    }

    /// All CPUs as a mask.
    pub fn online(&self) -> CpuMask {
        CpuMask::first_n(self.nr_cpus())
    }

    /// The active feature switches.
    pub fn features(&self) -> Features {
        Features::from_bits_truncate(self.features.load(Relaxed) ^ Features::DEFAULT.bits())
    }

    /// The tick rate `hz` of [`Smp::new`] or [`Smp::set_hz`] (0 is taken as [`DEFAULT_HZ`]).
    pub fn hz(&self) -> u32 {
        match self.hz.load(Relaxed) {
            0 => DEFAULT_HZ,
            hz => hz,
        }
    }

    /// Changes the tick rate before [`Smp::init`] (or while no task is alive): a kernel that
    /// learns its HZ at boot keeps one `static` machine built with the defaults (all zeros, no
    /// `.data`) and sets the rate here. Refused while tasks are alive, and a rate above
    /// [`MAX_HZ`] is refused ([`InitError::Hz`]), as `init` refuses it; nothing changes. On a
    /// machine already set up, what the balancer keeps in ticks of the old rate (each CPU's
    /// next balance, each level's last one, the groups' capacity refresh, the tickless
    /// balancer's times) is made due at once, so balancing goes on at the next tick.
    ///
    /// ```
    /// use sched_core::{NoPlatform, Smp, Features};
    /// static SMP: Smp<NoPlatform, 2, 16, 16> = Smp::new(NoPlatform, Features::DEFAULT, 250);
    /// SMP.set_hz(1000).unwrap();
    /// SMP.init_with(|t| t.init_flat(2)).unwrap();
    /// assert_eq!(SMP.hz(), 1000);
    /// ```
    pub fn set_hz(&self, hz: u32) -> Result<(), InitError> {
        check_hz(hz)?;
        let alive = self.table().len();
        if alive > 0 {
            return Err(InitError::TasksAlive(alive));
        }
        let old = self.hz();
        self.hz.store(if hz == 0 || hz == DEFAULT_HZ { 0 } else { hz }, Relaxed);
        if self.hz() != old {
            self.tick_times_due();
            #[cfg(feature = "eevdf")]
            for cpu in 0..self.nr_cpus() {
                self.rq(cpu).rq.tick_ns = self.tick_ns();
            }
        }
        Ok(())
    }

    /// The tick's length (ns, `TICK_NSEC`): 1 s / HZ.
    #[cfg(feature = "eevdf")]
    pub(crate) fn tick_ns(&self) -> u64 {
        1_000_000_000 / u64::from(self.hz().max(1))
    }

    /// Every time the balancer keeps in ticks, made due at once (its rate changed).
    fn tick_times_due(&self) {
        let topo = self.topology();
        for cpu in 0..topo.nr_cpus() {
            let mut b = self.bal(cpu);
            for d in b.domains.iter_mut() {
                d.last_balance = 0;
            }
            // (Under the balance-state lock, as every write of it is.)
            Slot::<u64>::set(&self.cpus[cpu].next_balance, 0);
        }
        self.for_each_group(&topo, |_, sgc| sgc.next_update.store(0, Relaxed));
        if CPUS > 1 && NOHZ {
            self.nohz.next_balance.store(0, Relaxed);
            self.nohz.next_blocked.store(0, Relaxed);
        }
    }

    /// Switches features at run time (every runqueue picks them up at once). Switching
    /// `EEVDF` on starts a request for every runnable task and group entity, the running ones
    /// included (CFS keeps none), and rebuilds each runqueue's average vruntime.
    pub fn set_features(&self, f: Features) {
        self.features.store(f.bits() ^ Features::DEFAULT.bits(), Relaxed);
        for cpu in 0..self.nr_cpus() {
            let mut st = self.rq(cpu);
            let t = *st.rq.tunables();
            #[cfg(feature = "eevdf")]
            let was = st.rq.eevdf();
            st.rq.configure(t, f);
            #[cfg(feature = "eevdf")]
            if st.rq.eevdf() && !was {
                st.fair(self.pool()).start_eevdf();
            }
        }
    }

    /// The tunables (the same on every CPU; before [`Smp::init`], all zero).
    pub fn tunables(&self) -> Tunables {
        *self.rq(0).rq.tunables()
    }

    /// Replaces the tunables on every CPU; values out of range ([`Tunables::check`]) are
    /// refused and nothing changes. Before [`Smp::init`] there is no CPU to hold them:
    /// [`SchedError::NotInitialised`] (init sets the defaults for the CPU count,
    /// [`Tunables::for_cpus`]).
    pub fn set_tunables(&self, t: Tunables) -> Result<(), SchedError> {
        t.check()?;
        self.initialised()?;
        let f = self.features();
        for cpu in 0..self.nr_cpus() {
            self.rq(cpu).rq.configure(t, f);
        }
        #[cfg(feature = "eevdf")]
        self.reclamp_kept_lags(t);
        Ok(())
    }

    /// Bounds every kept EEVDF lag by its task's slice again, after the default slice
    /// (`min_granularity_ns`) changed: the tasks attached to a runqueue under its lock, the
    /// parked ones under the table lock (taken after, as the lock order asks).
    #[cfg(feature = "eevdf")]
    fn reclamp_kept_lags(&self, t: Tunables) {
        let (default, tick) = (t.min_granularity_ns, self.tick_ns());
        for cpu in 0..self.nr_cpus() {
            let st = self.rq(cpu);
            for (_, id) in st.rq.attached() {
                self.pool().modify(id, |e| e.clamp_kept_lag(default, tick));
            }
        }
        let table = self.table();
        for (id, te) in table.iter() {
            if matches!(te.location, crate::table::Location::Parked { .. }) {
                self.pool().modify(id, |e| e.clamp_kept_lag(default, tick));
            }
        }
    }

    /// Read access to the topology.
    // Out of line, as the lock helpers below: each acquisition's spin loop is tens of bytes
    // of code at every call site, which a small machine's image pays for.
    #[inline(never)]
    pub fn topology(&self) -> RwLockReadGuard<'_, R, Topology<CPUS>> {
        self.topo.read()
    }

    /// `cpu`'s runqueue lock (out of line, see [`Smp::topology`]).
    #[inline(never)]
    pub(crate) fn rq(&self, cpu: usize) -> MutexGuard<'_, R, CpuState<Q, G>> {
        self.cpus[cpu].rq.lock()
    }

    /// `cpu`'s balance-state lock (out of line, see [`Smp::topology`]).
    #[inline(never)]
    pub(crate) fn bal(&self, cpu: usize) -> MutexGuard<'_, R, BalanceState> {
        self.cpus[cpu].balance.lock()
    }

    /// The task table's lock (out of line, see [`Smp::topology`]).
    #[inline(never)]
    pub(crate) fn table(&self) -> MutexGuard<'_, R, TaskTable<TASKS, P::Payload>> {
        self.tasks.lock()
    }

    internal! {
        /// Published figures of a CPU (lock-free). `cpu` is below `CPUS`: a larger one reads
        /// the last CPU's (the porter's [`crate::port::Scheduler::stats`] refuses it).
        pub fn stats(&self, cpu: usize) -> &RqStats {
            &self.cpus[cpu.min(CPUS - 1)].stats
        }
    }

    internal! {
        /// Runs `f` with a CPU's state locked (for platforms, tests and reports).
        pub fn with_cpu<T>(&self, cpu: usize, f: impl FnOnce(&CpuState<Q, G>) -> T) -> Result<T, SchedError> {
            self.check_cpu(cpu)?;
            Ok(f(&self.rq(cpu)))
        }
    }

    internal! {
        /// Runs `f` with a CPU's state locked and each task attached there with a copy of its
        /// entity, in slot order (for tests and reports that look at the entities of one
        /// runqueue).
        pub fn with_cpu_entities<T>(
            &self,
            cpu: usize,
            f: impl FnOnce(&CpuState<Q, G>, &mut dyn Iterator<Item = (TaskId, Entity)>) -> T,
        ) -> Result<T, SchedError> {
            self.check_cpu(cpu)?;
            let st = self.rq(cpu);
            let pool = self.pool();
            let mut it = st.rq.attached().filter_map(|(_, id)| pool.get(id).map(|e| (id, e)));
            Ok(f(&st, &mut it))
        }
    }

    internal! {
        /// A copy of a CPU's balancing state.
        pub fn balance_state(&self, cpu: usize) -> Result<BalanceState, SchedError> {
            self.check_cpu(cpu)?;
            Ok(*self.bal(cpu))
        }
    }

    /// Jiffy at which `cpu`'s next periodic balance is due (`cpu` below `CPUS`); not to be
    /// called while holding `cpu`'s balance-state lock. One load where the target has 64-bit
    /// atomics; else the word's two halves, under that lock, which every writer holds.
    #[inline]
    pub(crate) fn next_balance(&self, cpu: usize) -> u64 {
        #[cfg(not(target_has_atomic = "64"))]
        let _writers_out = self.bal(cpu);
        self.cpus[cpu].next_balance.get()
    }

    internal! {
        /// Jiffy at which a CPU's next periodic balance is due.
        pub fn next_balance_of(&self, cpu: usize) -> Result<u64, SchedError> {
            self.check_cpu(cpu)?;
            Ok(self.next_balance(cpu))
        }
    }

    internal! {
        /// The root domain's flags.
        pub fn root(&self) -> &RootDomain {
            &self.root
        }
    }

    /// Whether CPU `cpu` should call [`Smp::schedule`].
    pub fn need_resched(&self, cpu: usize) -> bool {
        cpu < self.nr_cpus() && self.rq(cpu).rq.need_resched()
    }

    /// The task running on `cpu`.
    pub fn current(&self, cpu: usize) -> Option<TaskId> {
        if cpu >= self.nr_cpus() {
            return None;
        }
        self.rq(cpu).rq.curr_id()
    }

    /// A task's state.
    pub fn state(&self, id: TaskId) -> Result<TaskState, SchedError> {
        self.initialised()?;
        Ok(self.table().get(id)?.state)
    }

    /// Where a task is: its CPU (the last one, for a sleeping task).
    pub fn task_cpu(&self, id: TaskId) -> Result<usize, SchedError> {
        self.initialised()?;
        match self.table().get(id)?.location {
            Location::OnCpu { cpu, .. } | Location::Parked { cpu, .. } => Ok(cpu as usize),
            Location::InTransit { from } => Ok(from as usize),
        }
    }

    /// The entity cells (touched only by an entity's owner: see [`crate::entities`]).
    pub(crate) fn pool(&self) -> Pool<'_> {
        #[cfg(feature = "groups")]
        return Pool::with_groups(
            self.ents.cells(),
            crate::entities::GroupCells {
                cells: self.gcells.as_flattened(),
                shared: &self.gshared,
                per_cpu: G,
            },
        );
        #[cfg(not(feature = "groups"))]
        self.ents.pool()
    }

    internal! {
        /// A copy of a task's entity, wherever it is.
        pub fn entity(&self, id: TaskId) -> Result<Entity, SchedError> {
            self.initialised()?;
            loop {
                let loc = match self.table().get(id)?.location {
                    // The table lock (held for this match) owns a parked entity.
                    Location::Parked { .. } => return self.pool().get(id).ok_or(SchedError::UnknownTask(id)),
                    loc => loc,
                };
                match loc {
                    Location::OnCpu { cpu, slot } => {
                        let st = self.rq(cpu as usize);
                        if st.rq.task_at(slot as u32) == Some(id) {
                            if let Some(e) = st.rq.entity_in(self.pool(), slot as u32) {
                                return Ok(e.get());
                            }
                        }
                        // It moved meanwhile: look again.
                    }
                    _ => core::hint::spin_loop(), // in transit
                }
            }
        }
    }

    /// Number of live tasks.
    pub fn nr_tasks(&self) -> usize {
        self.table().len()
    }

    /// [`SchedError::NotInitialised`] before the first [`Smp::init`]: every call that names
    /// a CPU, an affinity or a task answers it then, before checking anything else.
    pub(crate) fn initialised(&self) -> Result<(), SchedError> {
        if self.nr_cpus() == 0 {
            return Err(SchedError::NotInitialised);
        }
        Ok(())
    }

    fn check_cpu(&self, cpu: usize) -> Result<(), SchedError> {
        if cpu < self.nr_cpus() {
            Ok(())
        } else {
            Err(self.refused(SchedError::CpuOutOfRange(cpu)))
        }
    }

    fn check_affinity(&self, mask: &CpuMask) -> Result<(), SchedError> {
        if mask.is_empty() {
            return Err(self.refused(SchedError::EmptyAffinity));
        }
        if !mask.intersects(&self.online()) {
            return Err(self.refused(SchedError::AffinityNotOnline));
        }
        Ok(())
    }

    /// What a call whose input is refused with `e` answers: [`SchedError::NotInitialised`]
    /// before `init`. (Out of line: the checks it ends are inlined into every call.)
    #[cold]
    #[inline(never)]
    fn refused(&self, e: SchedError) -> SchedError {
        self.initialised().err().unwrap_or(e)
    }

    pub(crate) fn emit(&self, now: u64, cpu: usize, kind: EventKind) {
        self.platform.event(&Event { time: now, cpu, kind });
    }
}

/// `update_avg`: an exponential moving average with weight 1/8.
pub(crate) fn update_avg(avg: u64, sample: u64) -> u64 {
    // (Both held below 2^63, so that a clock's jump of a sample moves it up, not down, and the
    // signed arithmetic cannot overflow.)
    let (avg, sample) = (avg.min(i64::MAX as u64) as i64, sample.min(i64::MAX as u64) as i64);
    (avg + (sample - avg) / 8) as u64
}

/// The one bound on a tick rate, which `set_hz` and `init` both keep.
fn check_hz(hz: u32) -> Result<(), InitError> {
    if hz > MAX_HZ {
        return Err(InitError::Hz(hz));
    }
    Ok(())
}
