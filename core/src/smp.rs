//! The SMP scheduler: one [`RunQueue`] per CPU, each behind its own spin lock, the task
//! table, the topology, and the shared state the load balancer reads.
//!
//! ## Lock order (the one place it is written down)
//!
//! 1. A CPU's **balance-state** lock ([`CpuCell`]'s `balance`): held by whoever balances on
//!    that CPU's behalf (the CPU itself, or a nohz idle balancer), never while holding (2)
//!    or (3).
//! 2. **Runqueue** locks: at most two at once, and then the lower-numbered CPU first.
//! 3. The **task table** lock: innermost; taken with or without runqueue locks, never held
//!    while taking a runqueue lock.
//!
//! The topology is written once by [`Smp::init`] before any other call and only read after.
//!
//! The locks spin with the relax strategy `R` (default [`spin::Spin`], i.e.
//! `core::hint::spin_loop()`); a platform can supply its own, e.g. one that executes aarch64
//! `yield` so a spinning vCPU hands its slot to the lock holder under QEMU's icount mode.
//!
//! ## Read without a lock
//!
//! Each runqueue's owner publishes a few figures ([`RqStats`]: task counts, PELT averages,
//! capacity, misfit load, idleness) into atomics at the end of every operation under its lock.
//! The balancer reads other CPUs' figures from there without locking, as Linux reads remote
//! runqueues unlocked: a figure may be one operation old, which only makes a decision a
//! little stale — every move is re-validated under the runqueue locks before it happens.
//!
//! ## What never moves
//!
//! A task marked `on_cpu` (running, or still being switched away from because its CPU has
//! not called [`Smp::finish_switch`]) is never migrated: its context may not be saved yet.
//! A blocked task still `on_cpu` is woken in place, on its own CPU.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};

use spin::mutex::{Mutex, MutexGuard};
use spin::rwlock::RwLock;
use spin::{RelaxStrategy, Spin};

use crate::cpumask::CpuMask;
use crate::error::SchedError;
use crate::fair::{DequeueFlags, EnqueueFlags, WakeFlags};
use crate::features::{Features, Tunables};
use crate::platform::{Event, EventKind, MigrateReason, Platform};
use crate::runqueue::{InvariantViolation, NodeId, RunQueue};
use crate::table::{Location, TaskEntry, TaskTable};
use crate::task::{Entity, TaskId, TaskParams, TaskState};
use crate::topology::{Topology, TopologyDesc, TopologyError, MAX_LEVELS};
use crate::weights::Nice;

/// Figures of one runqueue, published by its owner for lock-free readers.
#[derive(Debug, Default)]
pub struct RqStats {
    /// `rq->nr_running` (all classes; only the fair class exists here).
    pub nr_running: AtomicU32,
    /// `cfs.h_nr_running`.
    pub h_nr_running: AtomicU32,
    /// Of which `SCHED_IDLE`.
    pub idle_h_nr_running: AtomicU32,
    /// `cpu_load`.
    pub load: AtomicU64,
    /// `cpu_runnable`.
    pub runnable: AtomicU64,
    /// `cpu_util` (with util_est, capped at capacity_orig).
    pub util: AtomicU64,
    /// `capacity_of`.
    pub capacity: AtomicU64,
    /// `capacity_orig_of` (fixed after `init`; published so readers need no topology lock).
    pub capacity_orig: AtomicU64,
    /// `rq->misfit_task_load`: load of a running task too big for this CPU, else 0.
    pub misfit_task_load: AtomicU64,
    /// No task running and none queued.
    pub idle: AtomicBool,
    /// `cfs.avg.util_avg` alone (for `cpu_util_without`).
    pub util_avg: AtomicU64,
    /// `cfs.avg.util_est.enqueued`.
    pub util_est: AtomicU64,
    /// When the CPU last went idle (ns), 0 while busy.
    pub idle_stamp: AtomicU64,
}

impl RqStats {
    const fn new() -> RqStats {
        RqStats {
            nr_running: AtomicU32::new(0),
            h_nr_running: AtomicU32::new(0),
            idle_h_nr_running: AtomicU32::new(0),
            load: AtomicU64::new(0),
            runnable: AtomicU64::new(0),
            util: AtomicU64::new(0),
            capacity: AtomicU64::new(1024),
            capacity_orig: AtomicU64::new(1024),
            misfit_task_load: AtomicU64::new(0),
            idle: AtomicBool::new(true),
            util_avg: AtomicU64::new(0),
            util_est: AtomicU64::new(0),
            idle_stamp: AtomicU64::new(0),
        }
    }

    fn publish<const Q: usize>(&self, st: &CpuState<Q>) {
        let rq = &st.rq;
        self.nr_running.store(rq.nr_running(), Relaxed);
        self.h_nr_running.store(rq.nr_running(), Relaxed);
        self.idle_h_nr_running.store(rq.idle_nr_running(), Relaxed);
        self.load.store(rq.cpu_load(), Relaxed);
        self.runnable.store(rq.cpu_runnable(), Relaxed);
        self.util.store(rq.cpu_util(), Relaxed);
        self.capacity.store(rq.capacity(), Relaxed);
        self.capacity_orig.store(rq.capacity_orig(), Relaxed);
        self.misfit_task_load.store(st.misfit_task_load, Relaxed);
        self.idle.store(rq.is_idle() && rq.nr_running() == 0, Relaxed);
        self.util_avg.store(rq.avg().util_avg, Relaxed);
        self.util_est.store(rq.avg().util_est.enqueued as u64, Relaxed);
        self.idle_stamp.store(st.idle_stamp, Relaxed);
    }
}

/// A CPU's state under its runqueue lock.
pub struct CpuState<const Q: usize> {
    /// The fair runqueue.
    pub rq: RunQueue<Q>,
    /// An active balance was requested and not yet carried out (`rq->active_balance`).
    pub active_balance: bool,
    /// Where the active balance pushes to.
    pub push_cpu: u32,
    /// `rq->misfit_task_load`.
    pub misfit_task_load: u64,
    /// When this CPU last went idle (ns), 0 while busy (`rq->idle_stamp`).
    pub idle_stamp: u64,
    /// Average idle period (ns), for newidle balance gating.
    pub avg_idle: u64,
    /// Upper bound on what one newidle balance is expected to cost (ns).
    pub max_idle_balance_cost: u64,
    /// Tasks that arrived here by migration.
    pub nr_migrations_in: u64,
    /// This CPU has a domain with asymmetric capacities (misfit tracking applies); set by
    /// `init` so the hot path does not consult the topology.
    pub asym_capacity: bool,
    /// The current task exec'd and placement chose another CPU for it: (node, CPU). It is
    /// switched out and moved there once its context is saved (`sched_exec`).
    pub exec_push: Option<(NodeId, u32)>,
}

/// Per-CPU, per-domain balancing state (what Linux keeps in each CPU's `sched_domain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DomainBalance {
    /// Current interval (ms), between min and max (or 512 when all pinned).
    pub balance_interval_ms: u64,
    /// Consecutive failed attempts.
    pub nr_balance_failed: u32,
    /// Jiffy of the last balance at this level.
    pub last_balance: u64,
    /// Highest cost (ns) of a newidle balance at this level, decayed over time.
    pub max_newidle_lb_cost: u64,
    /// When `max_newidle_lb_cost` decays next (ns).
    pub next_decay_max_lb_cost: u64,
}

/// Balancing state of one CPU, locked only by whoever balances for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BalanceState {
    /// Per domain, bottom-up.
    pub domains: [DomainBalance; MAX_LEVELS],
    /// Jiffy at which this CPU's next periodic balance is due.
    pub next_balance: u64,
}

/// Shared, lock-free group capacity state (Linux `sched_group_capacity`).
#[derive(Debug)]
pub struct GroupCapacity {
    /// Σ capacity_of over the group.
    pub capacity: AtomicU64,
    /// Smallest per-CPU capacity.
    pub min_capacity: AtomicU64,
    /// Largest per-CPU capacity.
    pub max_capacity: AtomicU64,
    /// The group could not be balanced because of affinity (`sgc->imbalance`).
    pub imbalance: AtomicBool,
    /// When (jiffies) a newidle pass may refresh it next.
    pub next_update: AtomicU64,
}

impl GroupCapacity {
    const fn new() -> GroupCapacity {
        GroupCapacity {
            capacity: AtomicU64::new(1024),
            min_capacity: AtomicU64::new(1024),
            max_capacity: AtomicU64::new(1024),
            imbalance: AtomicBool::new(false),
            next_update: AtomicU64::new(0),
        }
    }
}

/// One CPU: its runqueue lock, its published figures and its balance state.
pub struct CpuCell<const Q: usize, R = Spin> {
    /// The runqueue and per-CPU scheduling state.
    pub rq: Mutex<CpuState<Q>, R>,
    /// Figures for lock-free readers.
    pub stats: RqStats,
    /// Balancing state.
    pub balance: Mutex<BalanceState, R>,
}

/// The root domain's flags, written by root-level balancing and by enqueues.
#[derive(Debug, Default)]
pub struct RootDomain {
    /// Some CPU has more than one task, or a misfit task (`rd->overload`).
    pub overload: AtomicBool,
    /// Some CPU is over-utilised (`rd->overutilized`).
    pub overutilized: AtomicBool,
}

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
/// assert_eq!(smp.schedule(0, 0), Some(t));
/// smp.finish_switch(0, 0);
/// smp.check_invariants().unwrap();
/// ```
pub struct Smp<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R = Spin> {
    pub(crate) platform: P,
    pub(crate) topo: RwLock<Topology<CPUS>, R>,
    pub(crate) cpus: [CpuCell<Q, R>; CPUS],
    pub(crate) tasks: Mutex<TaskTable<TASKS>, R>,
    pub(crate) sgc: [[GroupCapacity; CPUS]; MAX_LEVELS],
    pub(crate) root: RootDomain,
    nr_cpus: AtomicU32,
    features: AtomicU32,
    pub(crate) hz: u32,
    /// Monotonic check of every CPU's min_vruntime for the invariant checker.
    last_min_vruntime: [AtomicU64; CPUS],
    /// Per LLC (indexed by its first CPU): average cost of an idle-CPU scan (ns).
    pub(crate) llc_scan_cost: [AtomicU64; CPUS],
    /// nohz idle-balancing state.
    pub(crate) nohz: crate::balance::nohz::Nohz<CPUS>,
}

/// `idle` argument of a balance pass (Linux `enum cpu_idle_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IdleType {
    /// The balancing CPU is idle (periodic balance from an idle tick or nohz).
    Idle,
    /// The balancing CPU is busy.
    NotIdle,
    /// The balancing CPU is about to go idle (newidle balance).
    NewlyIdle,
}

impl<P: Platform, const CPUS: usize, const TASKS: usize, const Q: usize, R: RelaxStrategy>
    Smp<P, CPUS, TASKS, Q, R>
{
    /// A machine with no CPUs yet; call [`Smp::init`] (or [`Smp::init_with`]) next. `const`
    /// so a kernel can place it in a static and initialise it in place.
    pub const fn new(platform: P, features: Features, hz: u32) -> Self {
        Smp {
            platform,
            topo: RwLock::new(Topology::empty()),
            cpus: [const {
                CpuCell {
                    rq: Mutex::new(CpuState {
                        rq: RunQueue::new(0, 1024, Tunables::DEFAULT, Features::DEFAULT),
                        active_balance: false,
                        push_cpu: 0,
                        misfit_task_load: 0,
                        idle_stamp: 0,
                        avg_idle: 2 * SYSCTL_MIGRATION_COST_NS,
                        max_idle_balance_cost: SYSCTL_MIGRATION_COST_NS,
                        nr_migrations_in: 0,
                        asym_capacity: false,
                        exec_push: None,
                    }),
                    stats: RqStats::new(),
                    balance: Mutex::new(BalanceState {
                        domains: [DomainBalance {
                            balance_interval_ms: 0,
                            nr_balance_failed: 0,
                            last_balance: 0,
                            max_newidle_lb_cost: 0,
                            next_decay_max_lb_cost: 0,
                        }; MAX_LEVELS],
                        next_balance: 0,
                    }),
                }
            }; CPUS],
            tasks: Mutex::new(TaskTable::new()),
            sgc: [const { [const { GroupCapacity::new() }; CPUS] }; MAX_LEVELS],
            root: RootDomain { overload: AtomicBool::new(false), overutilized: AtomicBool::new(false) },
            nr_cpus: AtomicU32::new(0),
            features: AtomicU32::new(features.bits()),
            hz: if hz == 0 { 250 } else { hz },
            last_min_vruntime: [const { AtomicU64::new(0) }; CPUS],
            llc_scan_cost: [const { AtomicU64::new(0) }; CPUS],
            nohz: crate::balance::nohz::Nohz::new(),
        }
    }

    /// Builds the topology from a description and sets every CPU up: capacities, tunables
    /// scaled for the CPU count, balance intervals. Call once, before anything else.
    pub fn init(&self, desc: &TopologyDesc) -> Result<(), TopologyError> {
        self.init_with(|t| t.init(desc))
    }

    /// Like [`Smp::init`] with one of the topology presets, e.g.
    /// `smp.init_with(|t| t.init_clusters(2, 4))`.
    pub fn init_with(
        &self,
        build: impl FnOnce(&mut Topology<CPUS>) -> Result<(), TopologyError>,
    ) -> Result<(), TopologyError> {
        let mut topo = self.topo.write();
        build(&mut topo)?;
        let n = topo.nr_cpus();
        let tunables = Tunables::for_cpus(n);
        let features = self.features();
        for cpu in 0..n {
            let cap = topo.capacity_orig(cpu);
            let mut st = self.cpus[cpu].rq.lock();
            st.rq = RunQueue::new(cpu as u32, cap, tunables, features);
            st.asym_capacity = topo.asym_cpucapacity_level(cpu).is_some();
            self.cpus[cpu].stats.publish(&st);
            self.last_min_vruntime[cpu].store(st.rq.min_vruntime(), Relaxed);
            let mut b = self.cpus[cpu].balance.lock();
            *b = BalanceState::default();
            for (i, d) in topo.domains(cpu).enumerate() {
                b.domains[i].balance_interval_ms = d.balance_interval_ms;
            }
        }
        for cpu in 0..n {
            for lvl in 0..topo.nr_levels(cpu) {
                for g in topo.groups(cpu, lvl) {
                    let sgc = self.sgc_of(g.id);
                    sgc.capacity.store(g.capacity, Relaxed);
                    sgc.min_capacity.store(g.min_capacity, Relaxed);
                    sgc.max_capacity.store(g.max_capacity, Relaxed);
                }
            }
        }
        self.nr_cpus.store(n as u32, Relaxed);
        Ok(())
    }

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
        Features::from_bits_truncate(self.features.load(Relaxed))
    }

    /// Switches features at run time (every runqueue picks them up at once).
    pub fn set_features(&self, f: Features) {
        self.features.store(f.bits(), Relaxed);
        for cpu in 0..self.nr_cpus() {
            let mut st = self.cpus[cpu].rq.lock();
            let t = *st.rq.tunables();
            st.rq.configure(t, f);
        }
    }

    /// The tunables (the same on every CPU).
    pub fn tunables(&self) -> Tunables {
        *self.cpus[0].rq.lock().rq.tunables()
    }

    /// Replaces the tunables on every CPU.
    pub fn set_tunables(&self, t: Tunables) {
        let f = self.features();
        for cpu in 0..self.nr_cpus() {
            self.cpus[cpu].rq.lock().rq.configure(t, f);
        }
    }

    /// Read access to the topology.
    pub fn topology(&self) -> spin::RwLockReadGuard<'_, Topology<CPUS>, R> {
        self.topo.read()
    }

    /// Published figures of a CPU.
    pub fn stats(&self, cpu: usize) -> &RqStats {
        &self.cpus[cpu.min(CPUS - 1)].stats
    }

    /// Runs `f` with a CPU's state locked (for platforms, tests and reports).
    pub fn with_cpu<T>(&self, cpu: usize, f: impl FnOnce(&CpuState<Q>) -> T) -> Result<T, SchedError> {
        self.check_cpu(cpu)?;
        Ok(f(&self.cpus[cpu].rq.lock()))
    }

    /// A copy of a CPU's balancing state.
    pub fn balance_state(&self, cpu: usize) -> Result<BalanceState, SchedError> {
        self.check_cpu(cpu)?;
        Ok(*self.cpus[cpu].balance.lock())
    }

    /// The root domain's flags.
    pub fn root(&self) -> &RootDomain {
        &self.root
    }

    /// Whether CPU `cpu` should call [`Smp::schedule`].
    pub fn need_resched(&self, cpu: usize) -> bool {
        cpu < self.nr_cpus() && self.cpus[cpu].rq.lock().rq.need_resched()
    }

    /// The task running on `cpu`.
    pub fn current(&self, cpu: usize) -> Option<TaskId> {
        if cpu >= self.nr_cpus() {
            return None;
        }
        self.cpus[cpu].rq.lock().rq.curr_id()
    }

    /// A task's state.
    pub fn state(&self, id: TaskId) -> Result<TaskState, SchedError> {
        Ok(self.tasks.lock().get(id)?.state)
    }

    /// Where a task is: its CPU (the last one, for a sleeping task).
    pub fn task_cpu(&self, id: TaskId) -> Result<u32, SchedError> {
        match self.tasks.lock().get(id)?.location {
            Location::OnCpu { cpu, .. } | Location::Parked { cpu, .. } => Ok(cpu),
            Location::InTransit { from } => Ok(from),
        }
    }

    /// A copy of a task's entity, wherever it is.
    pub fn entity(&self, id: TaskId) -> Result<Entity, SchedError> {
        loop {
            let loc = self.tasks.lock().get(id)?.location;
            match loc {
                Location::Parked { entity, .. } => return Ok(entity),
                Location::InTransit { .. } => core::hint::spin_loop(),
                Location::OnCpu { cpu, node } => {
                    let st = self.cpus[cpu as usize].rq.lock();
                    match st.rq.entity(node) {
                        Some(e) if e.id == id => return Ok(*e),
                        _ => continue, // moved meanwhile
                    }
                }
            }
        }
    }

    /// Number of live tasks.
    pub fn nr_tasks(&self) -> usize {
        self.tasks.lock().len()
    }

    fn check_cpu(&self, cpu: usize) -> Result<(), SchedError> {
        if cpu < self.nr_cpus() {
            Ok(())
        } else {
            Err(SchedError::CpuOutOfRange(cpu as u32))
        }
    }

    fn check_affinity(&self, mask: &CpuMask) -> Result<(), SchedError> {
        if mask.is_empty() {
            return Err(SchedError::EmptyAffinity);
        }
        if !mask.intersects(&self.online()) {
            return Err(SchedError::AffinityNotOnline);
        }
        Ok(())
    }

    pub(crate) fn emit(&self, now: u64, cpu: u32, kind: EventKind) {
        self.platform.event(&Event { time: now, cpu, kind });
    }

    /// After an operation on `cpu`'s runqueue: publish its figures and pass on a reschedule
    /// request.
    pub(crate) fn after_update(&self, cpu: usize, st: &mut CpuState<Q>) {
        self.update_misfit_status(st);
        self.cpus[cpu].stats.publish(st);
        if st.rq.nr_running() >= 2 {
            self.root.overload.store(true, Relaxed);
        }
        if st.rq.need_resched() {
            self.platform.resched_cpu(cpu as u32);
        }
    }

    /// `update_misfit_status`: on an asymmetric machine, the running task is misfit when it
    /// does not fit this CPU's capacity.
    fn update_misfit_status(&self, st: &mut CpuState<Q>) {
        st.misfit_task_load = match (st.asym_capacity, st.rq.curr_node()) {
            (true, Some(n)) => {
                let e = st.rq.ent(n);
                if e.on_rq && !fits_capacity(e.util_est(), st.rq.capacity()) {
                    e.avg.load_avg.max(1)
                } else {
                    0
                }
            }
            _ => 0,
        };
    }

    // ---- task life cycle ------------------------------------------------------------

    /// Creates a task on behalf of the task running on `cpu` (its parent), places it and
    /// makes it runnable. Returns its id.
    pub fn create(&self, cpu: usize, now: u64, params: TaskParams) -> Result<TaskId, SchedError> {
        self.check_cpu(cpu)?;
        let nice = Nice::new(params.nice)?;
        self.check_affinity(&params.affinity)?;
        let affinity = params.affinity.and(&self.online());
        // Choose the CPU and check for room before changing anything, so a refused
        // creation leaves every table and runqueue as it was.
        let mut template = Entity::new(TaskId::new(0, 0), nice, params.policy, affinity, cpu as u32);
        let (target, _) = self.select_task_rq(
            cpu,
            &mut template,
            crate::placement::SelectFor::Fork,
            WakeFlags::FORK,
            crate::placement::Waker::default(),
        );
        if !self.cpus[target].rq.lock().rq.has_room() {
            return Err(SchedError::RunQueueFull);
        }
        let id = self.tasks.lock().insert(TaskEntry {
            state: TaskState::Waking,
            location: Location::InTransit { from: cpu as u32 },
        })?;
        let mut child = Entity { id, ..template };
        {
            // task_fork_fair on the parent's runqueue; the vruntime comes back normalised.
            let mut st = self.cpus[cpu].rq.lock();
            st.rq.update_clock(now);
            st.rq.fork_vruntime(&mut child);
            self.after_update(cpu, &mut st);
        }
        match self.activate_on(target, now, child, EnqueueFlags::empty(), WakeFlags::FORK, true) {
            Ok(_) => {
                self.emit(now, target as u32, EventKind::NewTask { task: id });
                Ok(id)
            }
            Err(err) => {
                // Another CPU filled the target meanwhile.
                let _ = self.tasks.lock().remove(id);
                Err(err)
            }
        }
    }

    /// Puts an entity onto `cpu`'s runqueue (new task or wakeup) and checks preemption.
    fn activate_on(
        &self,
        cpu: usize,
        now: u64,
        mut e: Entity,
        flags: EnqueueFlags,
        wf: WakeFlags,
        new_task: bool,
    ) -> Result<NodeId, SchedError> {
        let mut st = self.cpus[cpu].rq.lock();
        st.rq.update_clock(now);
        e.cpu = cpu as u32;
        let id = e.id;
        let node = st.rq.insert(e).ok_or(SchedError::RunQueueFull)?;
        if new_task {
            st.rq.post_init_entity(node);
        }
        st.rq.enqueue(node, flags);
        // Land it in the table before this runqueue's lock is released: from then on the
        // CPU may pick it, and picking sets its state to Running.
        if let Ok(te) = self.tasks.lock().get_mut(id) {
            te.state = TaskState::Runnable;
            te.location = Location::OnCpu { cpu: cpu as u32, node };
        }
        st.rq.check_preempt_wakeup(node, wf);
        // Wakeup of an idle CPU: learn how long it idled (avg_idle), for newidle gating.
        if st.idle_stamp != 0 {
            let delta = now.saturating_sub(st.idle_stamp);
            let max = 2 * st.max_idle_balance_cost;
            st.avg_idle = update_avg(st.avg_idle, delta).min(max);
            st.idle_stamp = 0;
        }
        self.after_update(cpu, &mut st);
        Ok(node)
    }

    /// The task running on `cpu` blocks. It keeps the CPU until `schedule`.
    pub fn block(&self, cpu: usize, now: u64, id: TaskId) -> Result<(), SchedError> {
        self.check_cpu(cpu)?;
        let mut st = self.cpus[cpu].rq.lock();
        let mut t = self.tasks.lock();
        let entry = *t.get(id)?;
        let node = match (entry.state, entry.location) {
            (TaskState::Running, Location::OnCpu { cpu: c, node }) if c as usize == cpu => node,
            (state, _) => return Err(SchedError::InvalidState { task: id, state }),
        };
        st.rq.update_clock(now);
        st.rq.dequeue(node, DequeueFlags::SLEEP);
        if let Ok(e) = t.get_mut(id) {
            e.state = TaskState::Blocked;
        }
        drop(t);
        st.rq.resched_curr();
        self.after_update(cpu, &mut st);
        Ok(())
    }

    /// Wakes a blocked task; `cpu` is the waker's CPU. Returns the CPU it was queued on.
    pub fn wake(&self, cpu: usize, now: u64, id: TaskId) -> Result<u32, SchedError> {
        self.wake_with(cpu, now, id, WakeFlags::empty())
    }

    /// Wakes a blocked task with wakeup hints.
    pub fn wake_with(&self, cpu: usize, now: u64, id: TaskId, wf: WakeFlags) -> Result<u32, SchedError> {
        self.check_cpu(cpu)?;
        loop {
            let entry = *self.tasks.lock().get(id)?;
            if entry.state != TaskState::Blocked {
                if matches!(entry.state, TaskState::Waking) {
                    core::hint::spin_loop();
                    continue;
                }
                return Err(SchedError::InvalidState { task: id, state: entry.state });
            }
            match entry.location {
                Location::InTransit { .. } => {
                    core::hint::spin_loop();
                    continue;
                }
                Location::OnCpu { cpu: c, node } => {
                    // Still on its CPU (current or being switched out): requeue it there.
                    let c = c as usize;
                    let mut st = self.cpus[c].rq.lock();
                    let mut t = self.tasks.lock();
                    if t.get(id).copied() != Ok(entry) {
                        continue; // changed meanwhile
                    }
                    st.rq.update_clock(now);
                    st.rq.enqueue(node, EnqueueFlags::WAKEUP);
                    let state = if st.rq.curr_node() == Some(node) {
                        TaskState::Running
                    } else {
                        TaskState::Runnable
                    };
                    if let Ok(e) = t.get_mut(id) {
                        e.state = state;
                    }
                    drop(t);
                    st.rq.check_preempt_wakeup(node, wf);
                    self.after_update(c, &mut st);
                    drop(st);
                    self.emit(now, c as u32, EventKind::Waking { task: id });
                    return Ok(c as u32);
                }
                Location::Parked { cpu: prev, entity } => {
                    // Refuse before changing anything if no allowed CPU has room.
                    let allowed = entity.affinity.and(&self.online());
                    if !allowed.iter().any(|c| self.cpus[c].rq.lock().rq.has_room()) {
                        return Err(SchedError::RunQueueFull);
                    }
                    // Take it out of the table for the trip.
                    {
                        let mut t = self.tasks.lock();
                        match t.get_mut(id) {
                            Ok(e) if *e == entry => {
                                e.state = TaskState::Waking;
                                e.location = Location::InTransit { from: prev };
                            }
                            _ => continue,
                        }
                    }
                    let mut e = entity;
                    let waker = self.record_wakee(cpu, id, now);
                    let (mut target, affine) =
                        self.select_task_rq(cpu, &mut e, crate::placement::SelectFor::Wake(prev), wf, waker);
                    if !self.cpus[target].rq.lock().rq.has_room() {
                        // Full: the previous CPU, else any allowed CPU with room.
                        target = core::iter::once(prev as usize)
                            .chain(allowed.iter())
                            .find(|&c| allowed.contains(c) && self.cpus[c].rq.lock().rq.has_room())
                            .unwrap_or(target);
                    }
                    if affine {
                        let mut st = self.cpus[cpu].rq.lock();
                        if let Some(n) = st.rq.curr_node() {
                            if let Some(w) = st.rq.ent_mut(n) {
                                w.recent_used_cpu = cpu as u32;
                            }
                        }
                    }
                    let mut flags = EnqueueFlags::WAKEUP;
                    if target != prev as usize {
                        self.migrate_sleeping(&mut e, prev as usize);
                        flags |= EnqueueFlags::MIGRATED;
                    }
                    return match self.activate_on(target, now, e, flags, wf, false) {
                        Ok(_) => {
                            if target != prev as usize {
                                let reason = MigrateReason::Wakeup;
                                self.emit(
                                    now,
                                    target as u32,
                                    EventKind::Migrate { task: id, from: prev, reason },
                                );
                            }
                            self.emit(now, target as u32, EventKind::Waking { task: id });
                            Ok(target as u32)
                        }
                        Err(err) => {
                            // No room: put it back to sleep where it was, unchanged.
                            let mut t = self.tasks.lock();
                            if let Ok(te) = t.get_mut(id) {
                                *te = entry;
                            }
                            Err(err)
                        }
                    };
                }
            }
        }
    }

    /// `record_wakee`: the task current on `cpu` wakes `wakee`; count a flip if it is not
    /// the one it woke last (halving the count once a second). Returns what the wakeup
    /// path needs of the waker.
    fn record_wakee(&self, cpu: usize, wakee: TaskId, now: u64) -> crate::placement::Waker {
        let j = self.jiffies(now);
        let hz = self.hz as u64;
        let mut st = self.cpus[cpu].rq.lock();
        let Some(n) = st.rq.curr_node() else { return crate::placement::Waker::default() };
        let Some(w) = st.rq.ent_mut(n) else { return crate::placement::Waker::default() };
        if j > w.wakee_flip_decay_ts + hz {
            w.wakee_flips >>= 1;
            w.wakee_flip_decay_ts = j;
        }
        if w.last_wakee != Some(wakee) {
            w.last_wakee = Some(wakee);
            w.wakee_flips += 1;
        }
        crate::placement::Waker { flips: w.wakee_flips, load: w.avg.load_avg, present: true }
    }

    /// `migrate_task_rq_fair` for a sleeping task leaving `prev`: its vruntime becomes
    /// relative to prev's min_vruntime, its PELT signals leave prev through the lazily
    /// applied "removed" path, and it is no longer cache hot.
    fn migrate_sleeping(&self, e: &mut Entity, prev: usize) {
        let mut st = self.cpus[prev].rq.lock();
        e.vruntime = e.vruntime.wrapping_sub(st.rq.min_vruntime());
        st.rq.remove_entity_load(e);
        e.exec_start = 0;
    }

    /// A task exits: the task running on its CPU keeps it until `schedule`; any other
    /// task is gone at once. Its id becomes stale.
    pub fn exit(&self, now: u64, id: TaskId) -> Result<(), SchedError> {
        loop {
            let entry = *self.tasks.lock().get(id)?;
            match (entry.state, entry.location) {
                (TaskState::Exiting, _) => {
                    return Err(SchedError::InvalidState { task: id, state: entry.state })
                }
                (_, Location::InTransit { .. }) => core::hint::spin_loop(),
                (_, Location::Parked { cpu, mut entity }) => {
                    let mut st = self.cpus[cpu as usize].rq.lock();
                    let mut t = self.tasks.lock();
                    if t.get(id).copied() != Ok(entry) {
                        continue;
                    }
                    st.rq.remove_entity_load(&mut entity);
                    t.remove(id)?;
                    drop(t);
                    self.after_update(cpu as usize, &mut st);
                    drop(st);
                    self.emit(now, cpu, EventKind::Exit { task: id });
                    return Ok(());
                }
                (_, Location::OnCpu { cpu, node }) => {
                    let c = cpu as usize;
                    let mut st = self.cpus[c].rq.lock();
                    let mut t = self.tasks.lock();
                    if t.get(id).copied() != Ok(entry) {
                        continue;
                    }
                    st.rq.update_clock(now);
                    st.rq.dequeue(node, DequeueFlags::SLEEP);
                    let busy = st.rq.curr_node() == Some(node) || st.rq.switching_out_node() == Some(node);
                    if busy {
                        // Its CPU still runs it or is switching away: it leaves at finish_switch.
                        if let Ok(e) = t.get_mut(id) {
                            e.state = TaskState::Exiting;
                        }
                        st.rq.resched_curr();
                    } else {
                        if let Some(mut e) = st.rq.take(node) {
                            st.rq.remove_entity_load(&mut e);
                        }
                        t.remove(id)?;
                    }
                    drop(t);
                    self.after_update(c, &mut st);
                    drop(st);
                    self.emit(now, cpu, EventKind::Exit { task: id });
                    return Ok(());
                }
            }
        }
    }

    /// The scheduler tick on `cpu`: charges the running task, updates PELT, preempts if due,
    /// then runs the periodic load balancer when it is due. Returns whether `cpu` should
    /// reschedule.
    pub fn tick(&self, cpu: usize, now: u64) -> bool {
        if cpu >= self.nr_cpus() {
            return false;
        }
        let idle = {
            let mut st = self.cpus[cpu].rq.lock();
            st.rq.update_clock(now);
            st.rq.task_tick();
            self.after_update(cpu, &mut st);
            st.rq.is_idle()
        };
        self.trigger_load_balance(cpu, now, idle);
        self.cpus[cpu].rq.lock().rq.need_resched()
    }

    /// Picks what `cpu` runs next and makes it current. `None`: run the idle loop (or, if
    /// [`Smp::need_resched`] is still set after [`Smp::finish_switch`], call again). The
    /// previous task stays `on_cpu` until `finish_switch`.
    pub fn schedule(&self, cpu: usize, now: u64) -> Option<TaskId> {
        if cpu >= self.nr_cpus() {
            return None;
        }
        // Nothing to run: the CPU is about to idle.
        let goes_idle = |st: &CpuState<Q>| {
            let curr_runnable = st.rq.curr_node().is_some_and(|n| st.rq.ent(n).on_rq);
            st.rq.nr_queued() == 0 && !curr_runnable && !st.active_balance
        };
        // A platform that did not call finish_switch after the previous switch has saved that
        // context by now (it is calling schedule again on this CPU).
        let mut idle_next = {
            let mut st = self.cpus[cpu].rq.lock();
            self.finish_switch_locked(cpu, &mut st);
            goes_idle(&st)
        };
        // A kick to balance for the tickless idle CPUs is served first; it may pull work here.
        if self.nohz_idle_balance(cpu, now) {
            idle_next = goes_idle(&self.cpus[cpu].rq.lock());
        }
        // A CPU about to idle first tries to pull work (newidle balance).
        if idle_next {
            self.newidle_balance(cpu, now);
        }
        let mut st = self.cpus[cpu].rq.lock();
        st.rq.update_clock(now);
        let exec_leaving = st.exec_push.is_some_and(|(n, _)| st.rq.curr_node() == Some(n));
        let curr_disallowed = exec_leaving
            || st.rq.curr_node().is_some_and(|n| st.rq.ent(n).on_rq && !st.rq.ent(n).affinity.contains(cpu));
        let (prev, next) = if st.active_balance || curr_disallowed {
            // The stopper preempts everything: switch away from the running task so its
            // context is saved; the push (the balancer's, or away from a CPU its affinity
            // no longer allows) happens in finish_switch.
            let prev = st.rq.put_prev();
            if prev.is_some() {
                st.rq.switching_out = prev;
            }
            st.rq.need_resched = false;
            (prev, None)
        } else {
            st.rq.schedule_pick()
        };
        let ids = (prev.map(|n| st.rq.ent(n).id), next.map(|n| st.rq.ent(n).id));
        if next.is_none() && st.idle_stamp == 0 {
            st.idle_stamp = now.max(1);
        }
        // The switch's bookkeeping, and prev's state for the event, under one table lock.
        let prev_state = {
            let mut t = self.tasks.lock();
            let mut prev_state = None;
            if let (Some(p), true) = (ids.0, prev != next) {
                if let Ok(e) = t.get_mut(p) {
                    if e.state == TaskState::Running {
                        e.state = TaskState::Runnable;
                    }
                    prev_state = Some(e.state);
                }
            }
            if let Some(n) = ids.1 {
                if let Ok(e) = t.get_mut(n) {
                    e.state = TaskState::Running;
                }
            }
            prev_state
        };
        self.after_update(cpu, &mut st);
        drop(st);
        if prev != next {
            self.emit(now, cpu as u32, EventKind::Switch { prev: ids.0, prev_state, next: ids.1 });
        }
        ids.1
    }

    /// `cpu` has saved the context of the task it switched away from: that task may now
    /// run elsewhere, and if it blocked or exited it leaves the runqueue. Runs a pending
    /// active-balance push.
    pub fn finish_switch(&self, cpu: usize, now: u64) {
        if cpu >= self.nr_cpus() {
            return;
        }
        let mut st = self.cpus[cpu].rq.lock();
        let prev = st.rq.switching_out_node();
        self.finish_switch_locked(cpu, &mut st);
        // A task still queued here that may no longer run here leaves now that its
        // context is saved.
        let exec_dst = match (st.exec_push, prev) {
            (Some((n, dst)), Some(p)) if n == p => {
                st.exec_push = None;
                Some(dst as usize)
            }
            _ => None,
        };
        let evict = prev.and_then(|n| {
            st.rq
                .entity(n)
                .filter(|e| e.on_rq && (exec_dst.is_some() || !e.affinity.contains(cpu)))
                .map(|e| (n, *e))
        });
        let push = st.active_balance;
        if evict.is_some() {
            st.rq.resched_curr();
            self.after_update(cpu, &mut st);
        }
        drop(st);
        if let Some((node, e)) = evict {
            let mut e = e;
            let (dst, reason) = match exec_dst {
                Some(d) => (d, MigrateReason::Placement),
                None => {
                    let (d, _) = self.select_task_rq(
                        cpu,
                        &mut e,
                        crate::placement::SelectFor::Wake(cpu as u32),
                        WakeFlags::empty(),
                        crate::placement::Waker::default(),
                    );
                    (d, MigrateReason::Affinity)
                }
            };
            self.move_queued_task(cpu, e.id, node, dst, now, reason);
        }
        if push {
            self.active_balance_stop(cpu, now);
        }
    }

    fn finish_switch_locked(&self, cpu: usize, st: &mut CpuState<Q>) {
        let Some(mut e) = st.rq.finish_switch() else { return };
        let mut t = self.tasks.lock();
        let state = t.get(e.id).map(|x| x.state).ok();
        if state == Some(TaskState::Exiting) {
            st.rq.remove_entity_load(&mut e);
            let _ = t.remove(e.id);
        } else if let Ok(te) = t.get_mut(e.id) {
            te.location = Location::Parked { cpu: cpu as u32, entity: e };
        }
        drop(t);
        self.after_update(cpu, st);
    }

    /// The task running on `cpu` replaces its program (`sched_exec`): exec balancing may
    /// choose another CPU for it (the slow path over BALANCE_EXEC domains); then it is
    /// switched out and moved there. Returns the CPU it will run on.
    pub fn exec(&self, cpu: usize, now: u64, id: TaskId) -> Result<u32, SchedError> {
        self.check_cpu(cpu)?;
        let (node, mut e) = {
            let st = self.cpus[cpu].rq.lock();
            match st.rq.curr_node().and_then(|n| st.rq.entity(n).map(|e| (n, *e))) {
                Some((n, e)) if e.id == id && e.on_rq => (n, e),
                _ => {
                    let state = self.state(id)?;
                    return Err(SchedError::InvalidState { task: id, state });
                }
            }
        };
        let (dest, _) = self.select_task_rq(
            cpu,
            &mut e,
            crate::placement::SelectFor::Exec,
            WakeFlags::empty(),
            crate::placement::Waker::default(),
        );
        if dest != cpu {
            let mut st = self.cpus[cpu].rq.lock();
            if st.rq.curr_node() == Some(node) {
                st.rq.update_clock(now);
                st.exec_push = Some((node, dest as u32));
                st.rq.resched_curr();
                self.after_update(cpu, &mut st);
            }
        }
        Ok(dest as u32)
    }

    /// The task running on `cpu` yields once.
    pub fn yield_now(&self, cpu: usize, now: u64) {
        if cpu >= self.nr_cpus() {
            return;
        }
        let mut st = self.cpus[cpu].rq.lock();
        if st.rq.curr_node().is_none() {
            return;
        }
        st.rq.update_clock(now);
        st.rq.yield_curr();
        st.rq.resched_curr();
        self.after_update(cpu, &mut st);
    }

    /// Locks the runqueue of `cpu`, where the table placed task `id` at `loc`; `None` if the
    /// task moved before the lock was held (callers look it up again).
    fn lock_placed(&self, id: TaskId, loc: Location, cpu: usize) -> Option<MutexGuard<'_, CpuState<Q>, R>> {
        let st = self.cpus[cpu].rq.lock();
        (self.tasks.lock().get(id).map(|e| e.location) == Ok(loc)).then_some(st)
    }

    /// Changes a task's nice value, wherever it is.
    pub fn set_nice(&self, now: u64, id: TaskId, nice: i32) -> Result<(), SchedError> {
        let nice = Nice::new(nice)?;
        loop {
            let entry = *self.tasks.lock().get(id)?;
            match entry.location {
                Location::InTransit { .. } => core::hint::spin_loop(),
                Location::Parked { cpu, .. } => {
                    let mut st = self.cpus[cpu as usize].rq.lock();
                    let mut t = self.tasks.lock();
                    let Ok(te) = t.get_mut(id) else { continue };
                    // It may have woken and slept again elsewhere since the first look: only
                    // the runqueue it sleeps on may be adjusted.
                    let Location::Parked { cpu: now_on, entity } = &mut te.location else { continue };
                    if *now_on != cpu {
                        continue;
                    }
                    st.rq.update_clock(now);
                    st.rq.reweight_parked(entity, nice);
                    return Ok(());
                }
                Location::OnCpu { cpu, node } => {
                    let c = cpu as usize;
                    let Some(mut st) = self.lock_placed(id, entry.location, c) else { continue };
                    st.rq.update_clock(now);
                    st.rq.change_nice(node, nice);
                    self.after_update(c, &mut st);
                    return Ok(());
                }
            }
        }
    }

    /// Changes a task's allowed CPUs. A queued task on a CPU it may no longer use moves at
    /// once; a running one is preempted and moves when its CPU has switched away from it.
    pub fn set_affinity(&self, now: u64, id: TaskId, mask: CpuMask) -> Result<(), SchedError> {
        self.check_affinity(&mask)?;
        let mask = mask.and(&self.online());
        loop {
            let entry = *self.tasks.lock().get(id)?;
            match entry.location {
                Location::InTransit { .. } => core::hint::spin_loop(),
                Location::Parked { .. } => {
                    let mut t = self.tasks.lock();
                    let Ok(te) = t.get_mut(id) else { continue };
                    let Location::Parked { entity, .. } = &mut te.location else { continue };
                    entity.affinity = mask;
                    return Ok(());
                }
                Location::OnCpu { cpu, node } => {
                    let c = cpu as usize;
                    let Some(mut st) = self.lock_placed(id, entry.location, c) else { continue };
                    let Some(e) = st.rq.ent_mut(node) else { continue };
                    e.affinity = mask;
                    let (on_cpu, on_rq) = (e.on_cpu, e.on_rq);
                    if mask.contains(c) {
                        return Ok(());
                    }
                    if on_cpu {
                        // Running here: preempt it; it is pushed away once switched out.
                        if st.rq.curr_node() == Some(node) {
                            st.rq.resched_curr();
                        }
                        self.after_update(c, &mut st);
                        return Ok(());
                    }
                    if on_rq {
                        drop(st);
                        self.move_queued_task(
                            c,
                            id,
                            node,
                            mask.first().unwrap_or(0),
                            now,
                            MigrateReason::Affinity,
                        );
                    }
                    return Ok(());
                }
            }
        }
    }

    /// Moves a queued, not-running task from `src` to `dst` (both locks, lower CPU first).
    /// Gives up quietly if the task changed meanwhile.
    pub(crate) fn move_queued_task(
        &self,
        src: usize,
        id: TaskId,
        node: NodeId,
        dst: usize,
        now: u64,
        reason: MigrateReason,
    ) -> bool {
        if src == dst {
            return false;
        }
        // The caller chose `dst` from the affinity it saw; if that changed meanwhile, the
        // task goes to a CPU its current affinity allows (checked again under the locks).
        let allowed_now = {
            let st = self.cpus[src].rq.lock();
            match st.rq.entity(node) {
                Some(e) if e.id == id => e.affinity,
                _ => return false,
            }
        };
        let dst = if allowed_now.contains(dst) {
            dst
        } else {
            match allowed_now.and(&self.online()).iter().find(|&c| c != src) {
                Some(c) => c,
                None => return false,
            }
        };
        let (lo, hi) = if src < dst { (src, dst) } else { (dst, src) };
        let mut a = self.cpus[lo].rq.lock();
        let mut b = self.cpus[hi].rq.lock();
        let (s, d) = if src < dst { (&mut *a, &mut *b) } else { (&mut *b, &mut *a) };
        if !d.rq.has_room() {
            return false;
        }
        match s.rq.entity(node) {
            Some(e) if e.id == id && e.on_rq && !e.on_cpu && e.affinity.contains(dst) => {}
            _ => return false,
        }
        s.rq.update_clock(now);
        d.rq.update_clock(now);
        let Some(e) = s.rq.detach_task(node) else { return false };
        let Some(dn) = d.rq.attach_task(e) else { return false };
        d.nr_migrations_in += 1;
        if let Ok(te) = self.tasks.lock().get_mut(id) {
            te.location = Location::OnCpu { cpu: dst as u32, node: dn };
        }
        self.after_update(src, s);
        self.after_update(dst, d);
        drop(b);
        drop(a);
        self.emit(now, dst as u32, EventKind::Migrate { task: id, from: src as u32, reason });
        true
    }

    // ---- experiments ------------------------------------------------------------------

    /// Runs one `load_balance` of `cpu`'s domain `level` now, whether or not its interval
    /// has expired (experiments and tests). Returns (tasks moved, continue upwards); the
    /// [`crate::balance::BalanceRecord`] goes to the platform as an event.
    pub fn balance_domain(&self, cpu: usize, level: usize, idle: IdleType, now: u64) -> (u32, bool) {
        if cpu >= self.nr_cpus() {
            return (0, false);
        }
        let mut bal = self.cpus[cpu].balance.lock();
        self.load_balance(&mut bal, cpu, level, idle, now)
    }

    /// Overrides a CPU's runqueue PELT averages (sums set to match), as spec §6's
    /// scenarios inject them. `util` also becomes the runqueue's util_est sum if larger.
    pub fn inject_rq_pelt(&self, cpu: usize, util: u64, runnable: u64, load: u64) -> Result<(), SchedError> {
        self.check_cpu(cpu)?;
        let mut st = self.cpus[cpu].rq.lock();
        let a = &mut st.rq.avg;
        let div = a.divider();
        a.util_avg = util;
        a.util_sum = util * div;
        a.runnable_avg = runnable;
        a.runnable_sum = runnable * div;
        a.load_avg = load;
        a.load_sum = load * div;
        a.util_est.enqueued = a.util_est.enqueued.min(util as u32);
        st.rq.pelt_slack = crate::runqueue::PeltSlack::default();
        self.after_update(cpu, &mut st);
        Ok(())
    }

    /// Overrides a queued or running task's PELT averages and util_est (as spec §6's
    /// scenarios do); the runqueue's util_est sum follows.
    pub fn inject_task_pelt(
        &self,
        id: TaskId,
        util: u64,
        util_est: u32,
        load: u64,
    ) -> Result<(), SchedError> {
        let loc = self.tasks.lock().get(id)?.location;
        let Location::OnCpu { cpu, node } = loc else {
            return Err(SchedError::InvalidState { task: id, state: TaskState::Blocked });
        };
        let mut st = self.cpus[cpu as usize].rq.lock();
        let rq = &mut st.rq;
        let queued = rq.entity(node).is_some_and(|e| e.on_rq);
        let old = rq.entity(node).map(|e| e.avg.util_est).unwrap_or_default();
        if queued {
            crate::pelt::util_est_sub(&mut rq.avg.util_est, &old);
        }
        let Some(e) = rq.ent_mut(node) else { return Err(SchedError::UnknownTask(id)) };
        let div = e.avg.divider();
        e.avg.util_avg = util;
        e.avg.util_sum = util * div;
        e.avg.load_avg = load.min(e.weight());
        e.avg.load_sum = e.avg.load_avg * div / e.weight().max(1);
        e.avg.runnable_avg = util.min(1024);
        e.avg.runnable_sum = e.avg.runnable_avg * div;
        e.avg.util_est = crate::pelt::UtilEst { enqueued: util_est, ewma: util_est };
        let new = e.avg.util_est;
        if queued {
            crate::pelt::util_est_add(&mut rq.avg.util_est, &new);
        }
        st.rq.pelt_slack = crate::runqueue::PeltSlack::default();
        self.after_update(cpu as usize, &mut st);
        Ok(())
    }

    // ---- checks -----------------------------------------------------------------------

    /// Checks every invariant of the machine: each runqueue's own, `min_vruntime`
    /// monotonic per CPU, and that the task table and the runqueues agree on where every
    /// task is (no task lost, duplicated or on two runqueues) and on its state, and that no
    /// task sits on a CPU its affinity excludes unless it is running there. Takes every
    /// lock in order; meant for tests and stress runs.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let n = self.nr_cpus();
        let guards: heapless::Vec<MutexGuard<'_, CpuState<Q>, R>, CPUS> =
            (0..n).map(|c| self.cpus[c].rq.lock()).collect();
        let t = self.tasks.lock();
        let fail = |cpu: usize, what| Err(InvariantViolation { cpu: cpu as u32, what, task: None });
        let fail_t =
            |cpu: usize, what, t: TaskId| Err(InvariantViolation { cpu: cpu as u32, what, task: Some(t) });
        let mut attached = 0usize;
        for (c, st) in guards.iter().enumerate() {
            st.rq.check()?;
            let mv = st.rq.min_vruntime();
            let last = self.last_min_vruntime[c].load(Relaxed);
            if crate::timeline::vruntime_before(mv, last) {
                return fail(c, "min_vruntime went backwards");
            }
            self.last_min_vruntime[c].store(mv, Relaxed);
            attached += st.rq.nr_attached();
        }
        let mut on_cpu = 0usize;
        for (id, e) in t.iter() {
            match e.location {
                Location::OnCpu { cpu, node } => {
                    on_cpu += 1;
                    let c = cpu as usize;
                    let Some(st) = guards.get(c) else { return fail(c, "task on a CPU out of range") };
                    let Some(ent) = st.rq.entity(node) else {
                        return fail(c, "table points at an empty slot");
                    };
                    if ent.id != id {
                        return fail_t(c, "arena slot holds another task", id);
                    }
                    let is_curr = st.rq.curr_node() == Some(node);
                    let out = st.rq.switching_out_node() == Some(node);
                    let ok = match e.state {
                        TaskState::Running => is_curr && ent.on_rq,
                        TaskState::Runnable => !is_curr && ent.on_rq,
                        TaskState::Blocked | TaskState::Exiting => (is_curr || out) && !ent.on_rq,
                        TaskState::Waking => false,
                    };
                    if !ok {
                        return fail_t(c, "task state disagrees with its runqueue", id);
                    }
                    if !ent.affinity.contains(c) && !ent.on_cpu {
                        return fail_t(c, "queued task on a CPU outside its affinity", id);
                    }
                }
                Location::Parked { entity, cpu } => {
                    if e.state != TaskState::Blocked || entity.on_rq || entity.on_cpu || entity.id != id {
                        return fail_t(cpu as usize, "parked task is not a blocked, idle entity", id);
                    }
                }
                Location::InTransit { from } => return fail_t(from as usize, "task left in transit", id),
            }
        }
        if on_cpu != attached {
            for (c, st) in guards.iter().enumerate() {
                for (node, id) in st.rq.attached() {
                    let placed = matches!(t.get(id).map(|e| e.location), Ok(Location::OnCpu { cpu, node: n }) if cpu as usize == c && n == node);
                    if !placed {
                        return fail_t(c, "runqueue holds a task the table does not place there", id);
                    }
                }
            }
            return fail(0, "runqueues hold tasks the table does not place there");
        }
        Ok(())
    }
}

/// `fits_capacity`: `util` fits `capacity` with a 20 % margin.
pub fn fits_capacity(util: u64, capacity: u64) -> bool {
    util * 1280 < capacity * 1024
}

/// `update_avg`: an exponential moving average with weight 1/8.
pub(crate) fn update_avg(avg: u64, sample: u64) -> u64 {
    let diff = sample as i64 - avg as i64;
    (avg as i64 + diff / 8) as u64
}

/// `sysctl_sched_migration_cost` default (ns): cache-hot window and newidle cost floor.
pub const SYSCTL_MIGRATION_COST_NS: u64 = 500_000;
