//! The machine model: N CPUs in virtual time (ns) driving `sched_core::Smp` exactly as a
//! kernel does — a tick per CPU at HZ with its own phase, reschedule IPIs with a latency,
//! `schedule` + `finish_switch` around every switch — while tasks execute behaviours.
//!
//! Time only advances between events; within one event every core call sees the same `now`.
//! A CPU that runs a task makes progress on that task's current step; a switch costs
//! `switch_cost_ns` before the next task makes progress, and a task that lands on another
//! CPU than it last ran on first pays `migration_cost_ns` of cache refill.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use sched_core::balance::Outcome;
use sched_core::topology::{Topology, TopologyError};
use sched_core::{
    CpuMask, Event, EventKind, Features, InitError, Platform, RunnableInit, Smp, TaskId, TaskParams, Tunables,
};

use crate::rng::Rng;
use crate::trace::TraceLog;

/// Task-table size of the simulated machine.
pub const SIM_TASKS: usize = 4200;
/// Runnable tasks per CPU.
pub const SIM_Q: usize = 64;

/// The machine's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum TopologyKind {
    /// One cluster of all CPUs (what Linux builds on QEMU virt).
    Flat,
    /// Clusters of this many CPUs (2×4 is the seed's octo core).
    Clusters(usize),
    /// First half LITTLE CPUs of this capacity, second half big (1024).
    BigLittle(u64),
    /// Two NUMA nodes, each with clusters of this many CPUs.
    Numa(usize),
    /// `nodes` NUMA nodes of equal CPU counts (in order), each with clusters of `cluster`
    /// CPUs (0, or at least a node's CPUs: one cluster per node) — what the kernel builds
    /// from QEMU's `-numa node` options.
    NumaNodes {
        /// NUMA nodes.
        nodes: usize,
        /// Cluster size inside a node.
        cluster: usize,
    },
}

impl TopologyKind {
    /// Parses `flat`, `2x4`-style `clusters:4`, `biglittle:446`, `numa:4`, `nodes:4` (4 NUMA
    /// nodes) or `nodes:4:2` (4 nodes of clusters of 2).
    pub fn parse(s: &str) -> Option<TopologyKind> {
        let (name, arg) = s.split_once(':').unwrap_or((s, ""));
        match name {
            "nodes" => {
                let (nodes, cluster) = arg.split_once(':').unwrap_or((arg, "0"));
                let nodes = nodes.parse().ok().filter(|&n| n > 0)?;
                Some(TopologyKind::NumaNodes { nodes, cluster: cluster.parse().ok()? })
            }
            "flat" => Some(TopologyKind::Flat),
            "clusters" => arg.parse().ok().map(TopologyKind::Clusters),
            "biglittle" => Some(TopologyKind::BigLittle(arg.parse().unwrap_or(446))),
            "numa" => arg.parse().ok().map(TopologyKind::Numa),
            _ => None,
        }
    }

    /// The grammar [`TopologyKind::parse`] takes, for messages.
    pub const GRAMMAR: &'static str = "flat, clusters:K, biglittle:CAP, numa:K, nodes:N or nodes:N:K";

    /// Whether this shape fits `cpus` CPUs; `Err` says why in a few words.
    pub fn check(self, cpus: usize) -> Result<(), String> {
        let divides = |k: usize, of: usize, what: &str| {
            if k == 0 || !of.is_multiple_of(k) {
                Err(format!("{k} does not divide the {of} CPUs of {what}"))
            } else {
                Ok(())
            }
        };
        match self {
            TopologyKind::Flat => Ok(()),
            TopologyKind::Clusters(0) => Err("clusters of 0 CPUs (one cluster of all is `flat`)".into()),
            TopologyKind::Clusters(k) if k >= cpus => Ok(()),
            TopologyKind::Clusters(k) => divides(k, cpus, "the machine"),
            TopologyKind::BigLittle(cap) if cap == 0 || cap > 1024 => {
                Err(format!("the LITTLE capacity {cap} is not in 1..=1024"))
            }
            TopologyKind::BigLittle(_) if cpus < 2 => Err("big.LITTLE needs at least 2 CPUs".into()),
            TopologyKind::BigLittle(_) => Ok(()),
            TopologyKind::Numa(k) => TopologyKind::NumaNodes { nodes: 2, cluster: k }.check(cpus),
            TopologyKind::NumaNodes { nodes, cluster } => {
                divides(nodes, cpus, "the machine")
                    .map_err(|_| format!("{nodes} nodes do not divide the {cpus} CPUs"))?;
                let per = cpus / nodes;
                if cluster == 0 || cluster >= per {
                    Ok(())
                } else {
                    divides(cluster, per, "a node")
                }
            }
        }
    }

    /// The shape in words, on `cpus` CPUs: `flat 1x8`, `2x4 clusters`, `big.LITTLE 4 at 446 +
    /// 4 at 1024`, `2 NUMA nodes of 4 CPUs, clusters of 2`.
    pub fn describe(self, cpus: usize) -> String {
        match self {
            TopologyKind::Flat => format!("flat 1x{cpus}"),
            TopologyKind::Clusters(k) if k == 0 || k >= cpus => format!("flat 1x{cpus}"),
            TopologyKind::Clusters(k) => format!("{}x{k} clusters", cpus / k),
            TopologyKind::BigLittle(cap) => {
                format!("big.LITTLE {} at {cap} + {} at 1024", cpus / 2, cpus - cpus / 2)
            }
            TopologyKind::Numa(k) => TopologyKind::NumaNodes { nodes: 2, cluster: k }.describe(cpus),
            TopologyKind::NumaNodes { nodes, cluster } => {
                let per = cpus / nodes.max(1);
                let inside = if cluster == 0 || cluster >= per {
                    String::new()
                } else {
                    format!(", clusters of {cluster}")
                };
                format!("{nodes} NUMA nodes of {per} CPUs{inside}")
            }
        }
    }

    /// NUMA nodes (1: none).
    pub fn nodes(self) -> usize {
        match self {
            TopologyKind::Numa(_) => 2,
            TopologyKind::NumaNodes { nodes, .. } => nodes.max(1),
            _ => 1,
        }
    }

    /// The MC level's cluster size on `cpus` CPUs (0: one cluster per node).
    pub fn cluster_size(self, cpus: usize) -> usize {
        let per = cpus / self.nodes();
        let k = match self {
            TopologyKind::Flat => 0,
            TopologyKind::Clusters(k) | TopologyKind::Numa(k) => k,
            TopologyKind::BigLittle(_) => cpus / 2,
            TopologyKind::NumaNodes { cluster, .. } => cluster,
        };
        if k == 0 || k >= per {
            0
        } else {
            k
        }
    }

    /// Each CPU's capacity, if they differ (big.LITTLE: the first half LITTLE).
    pub fn capacities(self, cpus: usize) -> Option<Vec<u64>> {
        match self {
            TopologyKind::BigLittle(cap) => {
                Some((0..cpus).map(|c| if c < cpus / 2 { cap } else { 1024 }).collect())
            }
            _ => None,
        }
    }

    fn build<const C: usize>(self, t: &mut Topology<C>, cpus: usize) -> Result<(), TopologyError> {
        match self {
            TopologyKind::Flat => t.init_flat(cpus),
            TopologyKind::Clusters(k) => t.init_clusters(cpus / k.max(1), k.max(1)),
            TopologyKind::BigLittle(cap) => t.init_big_little(cpus / 2, cpus - cpus / 2, cap),
            TopologyKind::Numa(k) => t.init_numa(2, cpus / 2 / k.max(1), k.max(1)),
            TopologyKind::NumaNodes { nodes, cluster } => {
                let per = cpus / nodes.max(1);
                let k = if cluster == 0 || cluster >= per { per } else { cluster };
                t.init_numa(nodes.max(1), per / k.max(1), k.max(1))
            }
        }
    }
}

/// Parameters of a simulated machine.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Config {
    /// Number of CPUs.
    pub cpus: usize,
    /// Topology.
    pub topology: TopologyKind,
    /// Tick rate.
    pub hz: u32,
    /// Scheduler features.
    #[serde(serialize_with = "ser_features")]
    pub features: Features,
    /// New-task runnable initialisation (v5.7.0 or 5.7.14).
    #[serde(skip)]
    pub runnable_init: RunnableInit,
    /// Reschedule IPI latency.
    pub ipi_latency_ns: u64,
    /// A sysbench-like main thread's work before each worker's creation (thread-creation
    /// cost). (Written to traces only when not the default, which keeps older traces valid.)
    #[serde(skip_serializing_if = "is_default_create")]
    pub create_ns: u64,
    /// A sysbench-like worker's set-up before the start barrier.
    #[serde(skip_serializing_if = "is_default_setup")]
    pub setup_ns: u64,
    /// Cost of a context switch before the next task progresses.
    pub switch_cost_ns: u64,
    /// Cache refill paid by a task that runs on another CPU than last time.
    pub migration_cost_ns: u64,
    /// Idle CPUs stop their tick (nohz) and are kicked to balance.
    pub nohz: bool,
    /// Seed of all randomness (tick phases, workload jitter).
    pub seed: u64,
    /// Record a trace.
    pub trace: bool,
    /// Run the core's invariant checker after every event (stress tests; slow).
    #[serde(skip)]
    pub check_every_event: bool,
}

/// The default thread-creation cost of a sysbench-like main thread (ns).
pub const DEFAULT_CREATE_NS: u64 = 30_000;
/// The default set-up of a sysbench-like worker before the start barrier (ns).
pub const DEFAULT_SETUP_NS: u64 = 20_000;

fn is_default_create(ns: &u64) -> bool {
    *ns == DEFAULT_CREATE_NS
}

fn is_default_setup(ns: &u64) -> bool {
    *ns == DEFAULT_SETUP_NS
}

fn ser_features<S: serde::Serializer>(f: &Features, s: S) -> Result<S::Ok, S::Error> {
    let names: Vec<&str> = f.iter_names().map(|(n, _)| n).collect();
    s.collect_seq(names)
}

impl Config {
    /// The seed's machine: an octo core of 2 clusters × 4, HZ=250, features as in Linux.
    pub fn octo(seed: u64) -> Config {
        Config {
            cpus: 8,
            topology: TopologyKind::Clusters(4),
            hz: 250,
            features: Features::default(),
            runnable_init: RunnableInit::CpuCapacity,
            ipi_latency_ns: 5_000,
            create_ns: DEFAULT_CREATE_NS,
            setup_ns: DEFAULT_SETUP_NS,
            switch_cost_ns: 3_000,
            migration_cost_ns: 30_000,
            nohz: true,
            seed,
            trace: false,
            check_every_event: false,
        }
    }
}

/// What a task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behavior {
    /// sysbench's main thread: creates `threads` workers (`create_ns` of work before each),
    /// then sleeps until they have all exited.
    SysbenchMain {
        /// Workers to create.
        threads: u32,
        /// Work before each creation.
        create_ns: u64,
    },
    /// A sysbench worker: `init_ns` of set-up, then it waits at the start barrier with the
    /// other workers and the main thread (sysbench starts all threads together), then takes
    /// events from the shared counter until they run out, then exits.
    SysbenchWorker {
        /// Set-up work.
        init_ns: u64,
    },
    /// Runs forever.
    Spinner,
    /// Runs `run_ns`, sleeps `sleep_ns`, `repeat` times, then exits.
    Periodic {
        /// Work per period.
        run_ns: u64,
        /// Sleep per period.
        sleep_ns: u64,
        /// Periods.
        repeat: u32,
    },
}

/// Shared state of a sysbench-like run: the event counter and per-event records.
#[derive(Debug, Clone, Default)]
pub struct EventPool {
    /// Events to do.
    pub total: u64,
    /// Next event number.
    pub next: u64,
    /// Work per event.
    pub cost_ns: u64,
    /// Relative jitter of the work per event.
    pub jitter: f64,
    /// Latency of each finished event (ns), indexed by event number.
    pub latency: Vec<u64>,
    /// Tasks that must reach the start barrier before anyone proceeds (workers + main).
    pub barrier_parties: u32,
    /// Tasks waiting at the barrier.
    pub barrier_waiting: Vec<TaskId>,
    /// The barrier has been released.
    pub barrier_open: bool,
    /// How many times each event was done (must be exactly once).
    pub done: Vec<u32>,
}

#[derive(Debug, Clone)]
struct TaskSim {
    behavior: Behavior,
    /// Work left in the current step.
    remaining: u64,
    /// Steps taken so far (behaviour-specific meaning).
    step: u32,
    /// The event in progress and when it started.
    event: Option<(u64, u64)>,
    last_cpu: Option<usize>,
    name: String,
    parent: Option<TaskId>,
    children_alive: u32,
    is_worker: bool,
    /// CPU time it has had (ns).
    ran_ns: u64,
    /// When it last woke from a sleep and has not run since (latency probes: periodic tasks).
    woke_at: Option<u64>,
    /// A workload's label for the task's group (0 unless set with [`Machine::tag`]).
    tag: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Tick(usize),
    Ipi(usize),
    Done { cpu: usize, gen: u64 },
    Wake(TaskId),
}

/// The simulated tasks by core task id. The core's ids are table slots with a generation,
/// so a slot-indexed table does what a hash map did without hashing on every event.
#[derive(Debug, Default)]
struct TaskMap {
    slots: Vec<Option<(TaskId, TaskSim)>>,
    len: usize,
}

impl TaskMap {
    fn get(&self, id: &TaskId) -> Option<&TaskSim> {
        match self.slots.get(id.slot())? {
            Some((k, v)) if k == id => Some(v),
            _ => None,
        }
    }

    fn get_mut(&mut self, id: &TaskId) -> Option<&mut TaskSim> {
        match self.slots.get_mut(id.slot())? {
            Some((k, v)) if k == id => Some(v),
            _ => None,
        }
    }

    fn contains_key(&self, id: &TaskId) -> bool {
        self.get(id).is_some()
    }

    fn insert(&mut self, id: TaskId, v: TaskSim) {
        let i = id.slot();
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        if self.slots[i].replace((id, v)).is_none() {
            self.len += 1;
        }
    }

    fn remove(&mut self, id: &TaskId) -> Option<TaskSim> {
        let slot = self.slots.get_mut(id.slot())?;
        if !matches!(slot, Some((k, _)) if k == id) {
            return None;
        }
        self.len -= 1;
        slot.take().map(|(_, v)| v)
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Completion times from here on are never reached (a spinner's endless work).
const NEVER_NS: u64 = u64::MAX / 8;

#[derive(Debug, Clone, Default)]
struct CpuSim {
    running: Option<TaskId>,
    /// When the running task started making progress (after switch costs).
    since: u64,
    /// Bumped whenever the pending `Done` event is replaced, to ignore stale ones.
    gen: u64,
    /// The pending `Done` event (time, task). Re-arming with the same one changes nothing,
    /// so a task that keeps running does not leave one stale event per tick in the queue.
    armed: Option<(u64, TaskId)>,
    ticking: bool,
    ipi_pending: bool,
    phase: u64,
}

/// Requests the core made of the platform during one call.
#[derive(Debug, Default)]
pub struct SimPlatform {
    resched: RefCell<Vec<usize>>,
    /// (time, CPU) of each failed balance attempt, kept only while tracing.
    failures: RefCell<Option<Vec<(u64, usize)>>>,
    /// Counted migrations (all reasons).
    pub migrations: Cell<u64>,
    /// Balance attempts that found an imbalance and a queue but moved nothing.
    pub failed_balances: Cell<u64>,
    /// Active balances requested.
    pub active_balances: Cell<u64>,
    /// Σ tasks moved over balance records.
    pub balance_moved: Cell<u64>,
    /// Migrations the balancer's detach/attach reported (reason Balance).
    pub balance_migrations: Cell<u64>,
    /// Balance records whose outcome disagrees with what they say moved.
    pub inconsistent_records: Cell<u64>,
}

impl Platform for SimPlatform {
    type Payload = ();
    fn resched_cpu(&self, cpu: usize) {
        self.resched.borrow_mut().push(cpu);
    }
    fn event(&self, e: &Event) {
        match e.kind {
            EventKind::Migrate { reason, .. } => {
                self.migrations.set(self.migrations.get() + 1);
                if reason == sched_core::MigrateReason::Balance {
                    self.balance_migrations.set(self.balance_migrations.get() + 1);
                }
            }
            EventKind::Balance(r) => {
                self.balance_moved.set(self.balance_moved.get() + r.moved as u64);
                // A pass's last record is consistent when "moved" is its outcome exactly when the
                // pass moved tasks, and an attempt that found a queue names it.
                let consistent = (!r.outcome.ends_pass()
                    || (r.outcome == Outcome::Moved) == (r.pass_moved > 0))
                    && (!matches!(
                        r.outcome,
                        Outcome::Moved | Outcome::NothingDetachable | Outcome::ActiveBalance
                    ) || r.busiest_cpu.is_some());
                if !consistent {
                    self.inconsistent_records.set(self.inconsistent_records.get() + 1);
                }
                let failed = matches!(
                    r.outcome,
                    Outcome::NothingDetachable | Outcome::AllPinned | Outcome::ActiveBalance
                );
                if failed {
                    self.failed_balances.set(self.failed_balances.get() + 1);
                    if let Some(f) = self.failures.borrow_mut().as_mut() {
                        f.push((e.time, e.cpu));
                    }
                }
                if r.outcome == Outcome::ActiveBalance {
                    self.active_balances.set(self.active_balances.get() + 1)
                }
            }
            _ => {}
        }
    }
}

/// Figures of one run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RunReport {
    /// From the first worker's creation to the last worker's exit (ns).
    pub total_ns: u64,
    /// Per-event latencies (ns).
    #[serde(skip)]
    pub latencies: Vec<u64>,
    /// Mean per-event latency (ns).
    pub avg_latency_ns: f64,
    /// Max per-event latency (ns).
    pub max_latency_ns: u64,
    /// The spread time: from the first worker's creation to the first instant at which
    /// min(workers, CPUs) CPUs each run a worker (ns), if that happened.
    pub spread_ns: Option<u64>,
    /// The one-per-CPU time: the same, with each of those CPUs running its worker alone on
    /// its runqueue (with more workers than CPUs, the spread time).
    pub one_per_cpu_ns: Option<u64>,
    /// Migrations before full spread.
    pub migrations_to_spread: u64,
    /// Failed balance attempts before full spread.
    pub failed_to_spread: u64,
    /// Migrations in the whole run.
    pub migrations: u64,
    /// Failed balance attempts in the whole run.
    pub failed_balances: u64,
    /// Active balances requested.
    pub active_balances: u64,
    /// Every event done exactly once.
    pub events_exactly_once: bool,
    /// Simulated CPU-ticks processed.
    pub ticks: u64,
    /// Each timer wakeup's wait until its task ran: the periodic tasks' wake-to-run, with
    /// the task's tag (see [`Machine::tag`]), ns.
    #[serde(skip)]
    pub wake_latencies: Vec<(u8, u64)>,
    /// CPU time the live spinners have had (ns).
    #[serde(skip_serializing_if = "is_zero")]
    pub spinner_cpu_ns: u64,
    /// CPU time the live periodic tasks have had, per tag 0 and 1 (ns).
    #[serde(skip_serializing_if = "both_zero")]
    pub periodic_cpu_ns: [u64; 2],
}

fn both_zero(n: &[u64; 2]) -> bool {
    *n == [0, 0]
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The simulated machine.
pub struct Machine<const C: usize> {
    /// The scheduler under test.
    pub smp: Box<Smp<SimPlatform, C, SIM_TASKS, SIM_Q>>,
    cfg: Config,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    /// Pending ticks `(time, seq, cpu)` in time order, kept apart from `queue`: a CPU's
    /// next tick is one period after its current one, so it almost always goes to the back,
    /// and the most frequent event costs no heap operation.
    tick_queue: std::collections::VecDeque<(u64, u64, usize)>,
    cpus: Vec<CpuSim>,
    tasks: TaskMap,
    /// The shared event pool of sysbench-like workloads.
    pub pool: EventPool,
    rng: Rng,
    tick_ns: u64,
    trace: Option<TraceLog>,
    first_worker_at: Option<u64>,
    last_worker_exit: Option<u64>,
    spread_at: Option<(u64, u64, u64)>,
    one_per_cpu_at: Option<u64>,
    workers: u32,
    /// Workers a sysbench main thread will create (0: not a sysbench run).
    worker_target: u32,
    ticks: u64,
    /// Every timer wakeup's wait until the task ran (its tag, ns), in order.
    wake_latencies: Vec<(u8, u64)>,
}

impl<const C: usize> Machine<C> {
    /// Builds a machine (call on a thread with a large stack for big `C`).
    pub fn new(cfg: Config) -> Result<Machine<C>, InitError> {
        let smp: Box<Smp<SimPlatform, C, SIM_TASKS, SIM_Q>> =
            Box::new(Smp::new(SimPlatform::default(), cfg.features, cfg.hz));
        smp.init_with(|t| cfg.topology.build(t, cfg.cpus))?;
        if cfg.trace {
            *smp.platform().failures.borrow_mut() = Some(Vec::new());
        }
        let mut t = Tunables::for_cpus(cfg.cpus);
        t.runnable_init = cfg.runnable_init;
        smp.set_tunables(t).expect("the default tunables are in range");
        let mut rng = Rng::new(cfg.seed);
        let tick_ns = 1_000_000_000 / cfg.hz.max(1) as u64;
        let n = smp.nr_cpus();
        let mut cpus = vec![CpuSim::default(); n];
        for c in cpus.iter_mut() {
            c.phase = rng.below(tick_ns);
        }
        let mut m = Machine {
            smp,
            trace: cfg.trace.then(|| TraceLog::new(n)),
            cfg,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            tick_queue: std::collections::VecDeque::new(),
            cpus,
            tasks: TaskMap::default(),
            pool: EventPool::default(),
            rng,
            tick_ns,
            first_worker_at: None,
            last_worker_exit: None,
            spread_at: None,
            one_per_cpu_at: None,
            workers: 0,
            worker_target: 0,
            ticks: 0,
            wake_latencies: Vec::new(),
        };
        // Every CPU starts in its idle loop with its tick running.
        for cpu in 0..n {
            let at = m.cpus[cpu].phase;
            m.smp.schedule(cpu, at.max(1)).expect("a simulated CPU");
            m.smp.finish_switch(cpu, at.max(1)).expect("a simulated CPU");
            m.cpus[cpu].ticking = true;
            m.push(at + m.tick_ns, Ev::Tick(cpu));
        }
        Ok(m)
    }

    /// Virtual time now (ns).
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The trace recorded so far, if tracing.
    pub fn trace(&self) -> Option<&TraceLog> {
        self.trace.as_ref()
    }

    /// A copy of the trace with the failed balance attempts it saw, if tracing.
    pub fn trace_log(&self) -> Option<TraceLog> {
        let mut log = self.trace.clone()?;
        log.balance_failures = self.smp.platform().failures.borrow().clone().unwrap_or_default();
        Some(log)
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        match ev {
            Ev::Tick(cpu) => {
                let e = (at, self.seq, cpu);
                if self.tick_queue.back().is_none_or(|b| *b <= e) {
                    self.tick_queue.push_back(e);
                } else {
                    let i = self.tick_queue.partition_point(|x| *x <= e);
                    self.tick_queue.insert(i, e);
                }
            }
            _ => self.queue.push(Reverse((at, self.seq, ev))),
        }
    }

    /// Creates a task from `cpu` (its parent being the task running there) now. If `cpu`
    /// itself must reschedule, it gets a reschedule IPI.
    pub fn spawn(&mut self, cpu: usize, behavior: Behavior, name: &str, affinity: CpuMask) -> TaskId {
        let id = self.spawn_inner(cpu, behavior, name, affinity);
        self.ipi_self_if_resched(cpu);
        id
    }

    /// Changes a live task's nice value (experiments and stress).
    pub fn set_nice(&mut self, t: TaskId, nice: i32) -> bool {
        let ok = self.smp.set_nice(self.now, t, nice).is_ok();
        let cpu = self.smp.task_cpu(t).unwrap_or(0);
        self.ipi_self_if_resched(cpu);
        ok
    }

    /// If `cpu` must reschedule, sends it a reschedule IPI that arrives now (unless one is
    /// already pending).
    fn ipi_self_if_resched(&mut self, cpu: usize) {
        if self.smp.need_resched(cpu) && !self.cpus[cpu].ipi_pending {
            self.cpus[cpu].ipi_pending = true;
            self.push(self.now, Ev::Ipi(cpu));
        }
    }

    /// Creates a task from inside the event loop (the caller reschedules `cpu` if asked).
    fn spawn_inner(&mut self, cpu: usize, behavior: Behavior, name: &str, affinity: CpuMask) -> TaskId {
        self.now = self.now.max(1);
        let id = self
            .smp
            .create(cpu, self.now, TaskParams { affinity, ..TaskParams::default() })
            .expect("the simulated machine has room for its tasks");
        let parent = self.cpus[cpu].running;
        let is_worker = matches!(behavior, Behavior::SysbenchWorker { .. } | Behavior::Spinner);
        if let Behavior::SysbenchMain { threads, .. } = behavior {
            self.worker_target = threads;
        }
        let remaining = self.first_work(&behavior);
        self.tasks.insert(
            id,
            TaskSim {
                behavior,
                remaining,
                step: 0,
                event: None,
                last_cpu: None,
                name: name.replace([' ', '='], "_"),
                parent,
                children_alive: 0,
                is_worker,
                ran_ns: 0,
                woke_at: None,
                tag: 0,
            },
        );
        if let Some(p) = parent.and_then(|p| self.tasks.get_mut(&p)) {
            p.children_alive += 1;
        }
        if is_worker {
            self.workers += 1;
            self.first_worker_at.get_or_insert(self.now);
        }
        if let Some(t) = self.trace.as_mut() {
            let target = self.smp.task_cpu(id).unwrap_or(0);
            t.waking(self.now, target, id, name);
        }
        self.after_core_call(cpu);
        id
    }

    /// Makes `cpu` act on a pending reschedule request (after setting work up from
    /// outside the event loop).
    pub fn start(&mut self, cpu: usize) {
        if self.smp.need_resched(cpu) || self.cpus[cpu].running.is_none() {
            self.reschedule(cpu);
        }
    }

    fn first_work(&mut self, b: &Behavior) -> u64 {
        match *b {
            Behavior::SysbenchMain { create_ns, .. } => create_ns,
            Behavior::SysbenchWorker { init_ns } => init_ns.max(1),
            Behavior::Spinner => u64::MAX / 4,
            Behavior::Periodic { run_ns, .. } => run_ns.max(1),
        }
    }

    /// Runs until no task is left or `until` (ns) is reached. Returns whether tasks remain.
    pub fn run_until(&mut self, until: u64) -> bool {
        loop {
            // The earliest event of the two queues, ties in push order.
            let heap = self.queue.peek().map(|Reverse((at, seq, _))| (*at, *seq));
            let tick = self.tick_queue.front().map(|&(at, seq, _)| (at, seq));
            let from_ticks = match (heap, tick) {
                (None, None) => break,
                (Some(h), Some(t)) => t < h,
                (h, _) => h.is_none(),
            };
            let at = if from_ticks { tick.map_or(0, |t| t.0) } else { heap.map_or(0, |h| h.0) };
            if at > until {
                self.now = until;
                return true;
            }
            let ev = if from_ticks {
                self.tick_queue.pop_front().map(|(_, _, cpu)| Ev::Tick(cpu))
            } else {
                self.queue.pop().map(|Reverse((_, _, ev))| ev)
            };
            let Some(ev) = ev else { break };
            self.now = at;
            match ev {
                Ev::Tick(cpu) => self.on_tick(cpu),
                Ev::Ipi(cpu) => {
                    self.cpus[cpu].ipi_pending = false;
                    self.reschedule(cpu);
                }
                Ev::Done { cpu, gen } => {
                    if self.cpus[cpu].gen == gen {
                        self.cpus[cpu].armed = None;
                        self.on_done(cpu);
                    }
                }
                Ev::Wake(t) => self.on_wake(t),
            }
            if self.cfg.check_every_event {
                if let Err(v) = self.smp.check_invariants() {
                    panic!("invariant broken at {} ns after {:?}: {:?}", self.now, ev, v);
                }
            }
            if self.tasks.is_empty() {
                return false;
            }
        }
        // Nothing left to happen before `until`.
        self.now = self.now.max(until);
        !self.tasks.is_empty()
    }

    fn on_tick(&mut self, cpu: usize) {
        self.ticks += 1;
        let idle = self.cpus[cpu].running.is_none();
        if idle && self.cfg.nohz {
            // The tick stops on an idle CPU; it restarts when the CPU gets work.
            self.cpus[cpu].ticking = false;
            self.smp.nohz_enter_idle(cpu).expect("a simulated CPU");
            // A kick that arrived meanwhile is served when the CPU wakes.
            return;
        }
        self.account(cpu);
        // Read after balancing; what follows (passing requests on as IPIs, the trace's
        // counters) does not touch the core's runqueues.
        let resched = self.smp.tick(cpu, self.now).expect("a simulated CPU");
        self.after_core_call(cpu);
        if let Some(tr) = self.trace.as_mut() {
            let s = self.smp.stats(cpu);
            let load = |a: &sched_core::portable_atomic::AtomicU32| {
                a.load(std::sync::atomic::Ordering::Relaxed) as u64
            };
            tr.counter(self.now, cpu, load(&s.util), load(&s.load));
        }
        if resched {
            self.reschedule(cpu);
        } else {
            self.arm_done(cpu);
        }
        self.push(self.now + self.tick_ns, Ev::Tick(cpu));
    }

    /// Charges the running task for the time since it last made progress.
    fn account(&mut self, cpu: usize) {
        let c = &mut self.cpus[cpu];
        if let Some(t) = c.running {
            if self.now > c.since {
                let ran = self.now - c.since;
                if let Some(ts) = self.tasks.get_mut(&t) {
                    ts.remaining = ts.remaining.saturating_sub(ran);
                    ts.ran_ns += ran;
                }
                c.since = self.now;
            }
        }
    }

    /// (Re)arms the completion event of the running task's current step. Work that never
    /// ends (a spinner's) gets no event at all.
    fn arm_done(&mut self, cpu: usize) {
        let c = &self.cpus[cpu];
        let want = c.running.and_then(|t| {
            let at = c.since.max(self.now).saturating_add(self.tasks.get(&t)?.remaining);
            Some((at, t))
        });
        if want.is_some() && want == c.armed {
            return;
        }
        let c = &mut self.cpus[cpu];
        c.gen += 1;
        c.armed = None;
        let gen = c.gen;
        if let Some((at, t)) = want.filter(|&(at, _)| at < NEVER_NS) {
            c.armed = Some((at, t));
            self.push(at, Ev::Done { cpu, gen });
        }
    }

    /// Passes the core's reschedule requests on as IPIs.
    fn after_core_call(&mut self, this: usize) {
        // Drained in place: the request buffer keeps its capacity from call to call.
        let mut reqs = self.smp.platform().resched.borrow_mut();
        for c in reqs.drain(..) {
            if c == this || c >= self.cpus.len() || self.cpus[c].ipi_pending {
                continue;
            }
            self.cpus[c].ipi_pending = true;
            self.seq += 1;
            self.queue.push(Reverse((self.now + self.cfg.ipi_latency_ns, self.seq, Ev::Ipi(c))));
        }
    }

    /// `schedule` + `finish_switch` on `cpu` (as often as the core asks), then start the
    /// next task's progress after the switch costs.
    fn reschedule(&mut self, cpu: usize) {
        self.account(cpu);
        let prev = self.cpus[cpu].running;
        let mut next = None;
        for _ in 0..4 {
            next = self.smp.schedule(cpu, self.now).expect("a simulated CPU");
            self.smp.finish_switch(cpu, self.now).expect("a simulated CPU");
            self.after_core_call(cpu);
            if !self.smp.need_resched(cpu) {
                break;
            }
        }
        let c = &mut self.cpus[cpu];
        c.running = next;
        if next != prev {
            c.since = self.now + self.cfg.switch_cost_ns;
            if let Some(t) = next {
                let runs_at = c.since;
                if let Some(ts) = self.tasks.get_mut(&t) {
                    if ts.last_cpu.is_some_and(|l| l != cpu) {
                        ts.remaining = ts.remaining.saturating_add(self.cfg.migration_cost_ns);
                    }
                    ts.last_cpu = Some(cpu);
                    if let Some(woke) = ts.woke_at.take() {
                        self.wake_latencies.push((ts.tag, runs_at - woke));
                    }
                }
            }
            if let Some(tr) = self.trace.as_mut() {
                let name = |t: Option<TaskId>| t.and_then(|t| self.tasks.get(&t)).map(|s| s.name.clone());
                tr.switch(
                    self.now,
                    cpu,
                    prev,
                    name(prev),
                    next,
                    name(next),
                    prev.map(|p| self.smp.state(p).ok()),
                );
            }
        }
        if next.is_some() && !self.cpus[cpu].ticking {
            self.smp.nohz_exit_idle(cpu).expect("a simulated CPU");
            self.cpus[cpu].ticking = true;
            // Back on the CPU's tick grid.
            let k = (self.now.saturating_sub(self.cpus[cpu].phase)) / self.tick_ns + 1;
            self.push(self.cpus[cpu].phase + k * self.tick_ns, Ev::Tick(cpu));
        }
        self.arm_done(cpu);
        self.check_spread();
    }

    /// The spread instant and the one-per-CPU instant, as the kernel's report defines them
    /// (docs/seed-experiment.md): min(workers, CPUs) CPUs each running a worker, and each of
    /// them alone on its runqueue (the same instant with more workers than CPUs).
    fn check_spread(&mut self) {
        // The workers the run will have: a sysbench main thread says how many it creates;
        // otherwise all were created together.
        let target = if self.worker_target > 0 { self.worker_target } else { self.workers } as usize;
        let n = self.cpus.len();
        let want = target.min(n);
        if self.workers == 0 || self.one_per_cpu_at.is_some() || (self.workers as usize) < want {
            return;
        }
        // CPUs running a worker, and of them those running it alone (every one of them with
        // more workers than CPUs, where none can be alone).
        let (mut running, mut alone) = (0, 0);
        for c in 0..n {
            if self.cpus[c].running.and_then(|t| self.tasks.get(&t)).is_some_and(|t| t.is_worker) {
                running += 1;
                alone += usize::from(
                    target > n
                        || self.smp.stats(c).nr_running.load(std::sync::atomic::Ordering::Relaxed) == 1,
                );
            }
        }
        if self.spread_at.is_none() && running >= want {
            let p = self.smp.platform();
            self.spread_at = Some((self.now, p.migrations.get(), p.failed_balances.get()));
        }
        if alone >= want {
            self.one_per_cpu_at = Some(self.now);
        }
    }

    /// The running task finished its current step.
    fn on_done(&mut self, cpu: usize) {
        self.account(cpu);
        let Some(t) = self.cpus[cpu].running else { return };
        // Only the Copy fields: no clone of the name on every event.
        let Some(&TaskSim { behavior, remaining, step, event, .. }) = self.tasks.get(&t) else { return };
        if remaining > 0 {
            self.arm_done(cpu);
            return;
        }
        match behavior {
            Behavior::SysbenchMain { threads, create_ns } => {
                if step < threads {
                    let name = format!("worker{step}");
                    if let Some(s) = self.tasks.get_mut(&t) {
                        s.step += 1;
                    }
                    let init_ns = self.cfg.setup_ns;
                    self.spawn_inner(cpu, Behavior::SysbenchWorker { init_ns }, &name, CpuMask::ALL);
                    // spawn_inner changes only the new task's entry and this one's
                    // children_alive, so the step is still the one just set.
                    if step + 1 < threads {
                        if let Some(s) = self.tasks.get_mut(&t) {
                            s.remaining = create_ns;
                        }
                        if self.smp.need_resched(cpu) {
                            self.reschedule(cpu);
                        } else {
                            self.arm_done(cpu);
                        }
                        return;
                    }
                }
                // All created: meet the workers at the start barrier (once), then wait for
                // them to finish (woken by the last one's exit).
                if !self.pool.barrier_open && self.tasks.get(&t).is_some_and(|s| s.step == threads) {
                    if let Some(s) = self.tasks.get_mut(&t) {
                        s.step += 1;
                    }
                    if !self.arrive_at_barrier(cpu, t) {
                        return;
                    }
                }
                // Children only exit in their own Done events, so none has exited since this
                // event began: the live count is the one to read.
                if self.tasks.get(&t).is_some_and(|s| s.children_alive > 0) {
                    self.smp.block(cpu, self.now, t).expect("main runs");
                    self.after_core_call(cpu);
                    self.reschedule(cpu);
                } else {
                    self.finish_task(cpu, t);
                }
            }
            Behavior::SysbenchWorker { .. } => {
                if step == 0 {
                    // Set-up done: the start barrier.
                    if let Some(s) = self.tasks.get_mut(&t) {
                        s.step = 1;
                    }
                    if !self.arrive_at_barrier(cpu, t) {
                        return;
                    }
                }
                if let Some((ev, start)) = event {
                    self.pool.latency[ev as usize] = self.now - start;
                    self.pool.done[ev as usize] += 1;
                }
                if self.pool.next < self.pool.total {
                    let ev = self.pool.next;
                    self.pool.next += 1;
                    let cost = self.rng.jitter(self.pool.cost_ns, self.pool.jitter).max(1);
                    let now = self.now;
                    if let Some(s) = self.tasks.get_mut(&t) {
                        s.event = Some((ev, now));
                        s.remaining = cost;
                    }
                    self.arm_done(cpu);
                } else {
                    self.finish_task(cpu, t);
                }
            }
            Behavior::Spinner => {
                if let Some(s) = self.tasks.get_mut(&t) {
                    s.remaining = u64::MAX / 4;
                }
                self.arm_done(cpu);
            }
            Behavior::Periodic { run_ns, sleep_ns, repeat } => {
                let step = step + 1;
                if step >= repeat {
                    self.finish_task(cpu, t);
                } else {
                    if let Some(s) = self.tasks.get_mut(&t) {
                        s.step = step;
                        s.remaining = run_ns.max(1);
                    }
                    self.smp.block(cpu, self.now, t).expect("periodic task runs");
                    self.after_core_call(cpu);
                    self.push(self.now + sleep_ns, Ev::Wake(t));
                    self.reschedule(cpu);
                }
            }
        }
    }

    /// `t` (running on `cpu`) reaches the start barrier. The last party releases everyone
    /// (waking them from this CPU) and goes on: returns true. Others block: false.
    fn arrive_at_barrier(&mut self, cpu: usize, t: TaskId) -> bool {
        if self.pool.barrier_open || self.pool.barrier_parties == 0 {
            return true;
        }
        if (self.pool.barrier_waiting.len() as u32) + 1 < self.pool.barrier_parties {
            self.pool.barrier_waiting.push(t);
            self.smp.block(cpu, self.now, t).expect("the arriving task runs");
            self.after_core_call(cpu);
            self.reschedule(cpu);
            return false;
        }
        self.pool.barrier_open = true;
        for w in std::mem::take(&mut self.pool.barrier_waiting) {
            // They blocked in place; a worker whose CPU has not switched away yet is woken
            // there.
            self.wake_traced(cpu, w, "a waiter sleeps");
        }
        if self.smp.need_resched(cpu) {
            self.reschedule(cpu);
        }
        true
    }

    /// Wakes the sleeping `t` from `waker`, records the waking in the trace and passes the
    /// core's reschedule requests on. `sleeping` is the panic message if `t` does not sleep.
    fn wake_traced(&mut self, waker: usize, t: TaskId, sleeping: &str) {
        let target = self.smp.wake(waker, self.now, t).expect(sleeping);
        if let Some(tr) = self.trace.as_mut() {
            let name = self.tasks.get(&t).map_or("", |s| s.name.as_str());
            tr.waking(self.now, target, t, name);
        }
        self.after_core_call(waker);
    }

    fn finish_task(&mut self, cpu: usize, t: TaskId) {
        let ts = self.tasks.remove(&t);
        self.smp.exit(self.now, t).expect("a live task exits");
        self.after_core_call(cpu);
        if let Some(ts) = ts {
            if ts.is_worker {
                self.last_worker_exit = Some(self.now);
            }
            if let Some(p) = ts.parent {
                let wake = match self.tasks.get_mut(&p) {
                    Some(ps) => {
                        ps.children_alive = ps.children_alive.saturating_sub(1);
                        ps.children_alive == 0 && self.smp.state(p) == Ok(sched_core::TaskState::Blocked)
                    }
                    None => false,
                };
                if wake {
                    self.smp.wake(cpu, self.now, p).expect("the parent sleeps");
                    self.after_core_call(cpu);
                }
            }
        }
        self.reschedule(cpu);
    }

    fn on_wake(&mut self, t: TaskId) {
        if !self.tasks.contains_key(&t) {
            return;
        }
        // A timer wakeup fires on the CPU the task slept on.
        let waker = self.smp.task_cpu(t).unwrap_or(0);
        if let Some(ts) = self.tasks.get_mut(&t) {
            ts.woke_at = Some(self.now);
        }
        self.wake_traced(waker, t, "sleeper wakes");
        if self.smp.need_resched(waker) {
            self.reschedule(waker);
        }
    }

    /// The main task of a sysbench-like run ended: the sysbench figures.
    pub fn report(&self) -> RunReport {
        let p = self.smp.platform();
        let lat: Vec<u64> = self.pool.latency.clone();
        let total = match (self.first_worker_at, self.last_worker_exit) {
            (Some(a), Some(b)) => b - a,
            _ => 0,
        };
        let n = lat.len().max(1) as f64;
        RunReport {
            total_ns: total,
            avg_latency_ns: lat.iter().sum::<u64>() as f64 / n,
            max_latency_ns: lat.iter().copied().max().unwrap_or(0),
            latencies: lat,
            spread_ns: self.spread_at.map(|(t, _, _)| t - self.first_worker_at.unwrap_or(0)),
            one_per_cpu_ns: self.one_per_cpu_at.map(|t| t - self.first_worker_at.unwrap_or(0)),
            migrations_to_spread: self.spread_at.map_or(p.migrations.get(), |s| s.1),
            failed_to_spread: self.spread_at.map_or(p.failed_balances.get(), |s| s.2),
            migrations: p.migrations.get(),
            failed_balances: p.failed_balances.get(),
            active_balances: p.active_balances.get(),
            events_exactly_once: !self.pool.done.is_empty() && self.pool.done.iter().all(|&d| d == 1),
            ticks: self.ticks,
            wake_latencies: self.wake_latencies.clone(),
            spinner_cpu_ns: self.cpu_time_of(|t| matches!(t.behavior, Behavior::Spinner)),
            periodic_cpu_ns: [0, 1].map(|tag| {
                self.cpu_time_of(|t| matches!(t.behavior, Behavior::Periodic { .. }) && t.tag == tag)
            }),
        }
    }

    /// Labels task `t`'s group for the figures (wake-to-run times and CPU time are reported
    /// per tag).
    pub fn tag(&mut self, t: TaskId, tag: u8) {
        if let Some(ts) = self.tasks.get_mut(&t) {
            ts.tag = tag;
        }
    }

    /// CPU time (ns) the live tasks `which` selects have had, the running ones' up to now.
    fn cpu_time_of(&self, which: impl Fn(&TaskSim) -> bool) -> u64 {
        let running: u64 = self
            .cpus
            .iter()
            .filter_map(|c| {
                let t = self.tasks.get(&c.running?)?;
                which(t).then(|| self.now.saturating_sub(c.since))
            })
            .sum();
        let settled: u64 =
            self.tasks.slots.iter().flatten().filter(|(_, t)| which(t)).map(|(_, t)| t.ran_ns).sum();
        settled + running
    }

    /// Sets up a sysbench-like pool of `events` of `cost_ns` (± `jitter`).
    pub fn set_pool(&mut self, events: u64, cost_ns: u64, jitter: f64, barrier_parties: u32) {
        self.pool = EventPool {
            total: events,
            next: 0,
            cost_ns,
            jitter,
            latency: vec![0; events as usize],
            done: vec![0; events as usize],
            barrier_parties,
            barrier_waiting: Vec::new(),
            barrier_open: false,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(step: u32) -> TaskSim {
        TaskSim {
            behavior: Behavior::Spinner,
            remaining: 0,
            step,
            event: None,
            last_cpu: None,
            name: String::new(),
            parent: None,
            children_alive: 0,
            is_worker: false,
            ran_ns: 0,
            woke_at: None,
            tag: 0,
        }
    }

    #[test]
    fn task_map_tells_generations_of_a_slot_apart() {
        let mut m = TaskMap::default();
        let old = TaskId::new(3, 0);
        let new = TaskId::new(3, 1);
        m.insert(old, task(1));
        assert!(m.contains_key(&old) && !m.contains_key(&new));
        assert!(m.remove(&new).is_none(), "a different generation removes nothing");
        assert_eq!(m.remove(&old).map(|t| t.step), Some(1));
        assert!(m.is_empty());
        m.insert(new, task(2));
        assert!(m.get(&old).is_none(), "a stale id finds nothing in its reused slot");
        assert_eq!(m.get(&new).map(|t| t.step), Some(2));
        assert!(m.get(&TaskId::new(40, 0)).is_none(), "beyond the table");
        assert!(!m.is_empty());
    }
}
