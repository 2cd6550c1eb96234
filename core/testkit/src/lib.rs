//! Test support for `sched-core`, shared by the core's integration tests: a [`Recorder`] platform that keeps what the core asked for and told,
//! machine set-up ([`machine`]), scenario helpers ([`spawn_on`], [`run_cpu`], [`idle_all`])
//! and a deterministic one-CPU [`Driver`].
//!
//! It turns on sched-core's `testing` feature (the balance and PELT injection hooks).
//!
//! ```
//! use sched_testkit::{machine, run_cpu, spawn_on, Recorder};
//! use sched_core::{Features, Smp};
//! let m: Box<Smp<Recorder, 8, 64, 64>> = machine(Features::default(), |t| t.init_clusters(2, 4));
//! let t = spawn_on(&m, 3, 1_000_000);
//! assert_eq!(run_cpu(&m, 3, 1_000_000), Some(t));
//! assert!(m.platform().events().len() >= 1);
//! ```

pub mod hotpath;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use sched_core::balance::BalanceRecord;
use sched_core::topology::Topology;
use sched_core::{
    CpuMask, Event, EventKind, Features, Platform, SingleCpu, Smp, TaskId, TaskParams, TopologyError,
    Tunables,
};

/// The most CPUs a [`Recorder`] keeps reschedule flags for.
pub const MAX_RECORDED_CPUS: usize = 1024;

/// A platform that records: every event (unless [`Recorder::quiet`]), stopper and nohz-kick
/// requests, reschedule requests as per-CPU flags, a log and a count, and a count of migrations.
pub struct Recorder {
    keep_log: bool,
    events: Mutex<Vec<Event>>,
    stoppers: Mutex<Vec<usize>>,
    kicks: Mutex<Vec<usize>>,
    resched_log: Mutex<Vec<usize>>,
    resched: Vec<AtomicBool>,
    resched_count: AtomicU64,
    migrations: AtomicU64,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new(MAX_RECORDED_CPUS)
    }
}

impl Recorder {
    /// A recorder for up to `cpus` CPUs that keeps every event and request.
    pub fn new(cpus: usize) -> Recorder {
        Recorder {
            keep_log: true,
            events: Mutex::new(Vec::new()),
            stoppers: Mutex::new(Vec::new()),
            kicks: Mutex::new(Vec::new()),
            resched_log: Mutex::new(Vec::new()),
            resched: (0..cpus.min(MAX_RECORDED_CPUS)).map(|_| AtomicBool::new(false)).collect(),
            resched_count: AtomicU64::new(0),
            migrations: AtomicU64::new(0),
        }
    }

    /// A recorder that only keeps flags and counts (no growing logs), for long stress runs.
    pub fn quiet(cpus: usize) -> Recorder {
        Recorder { keep_log: false, ..Recorder::new(cpus) }
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// Every balance record so far, oldest first.
    pub fn balance_records(&self) -> Vec<BalanceRecord> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::Balance(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    /// The newest balance record; panics if there is none.
    pub fn last_balance(&self) -> BalanceRecord {
        *self.balance_records().last().expect("a balance record")
    }

    /// (time, next) of every context switch so far.
    pub fn switches(&self) -> Vec<(u64, Option<TaskId>)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::Switch { next, .. } => Some((e.time, next)),
                _ => None,
            })
            .collect()
    }

    /// (task, destination CPU) of every migration so far.
    pub fn migrations(&self) -> Vec<(TaskId, usize)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::Migrate { task, .. } => Some((task, e.cpu)),
                _ => None,
            })
            .collect()
    }

    /// How many migrations happened (counted in quiet mode too).
    pub fn migration_count(&self) -> u64 {
        self.migrations.load(Relaxed)
    }

    /// CPUs asked to run their active-balance stopper, in order.
    pub fn stoppers(&self) -> Vec<usize> {
        self.stoppers.lock().unwrap().clone()
    }

    /// CPUs kicked for a nohz idle balance, in order.
    pub fn kicks(&self) -> Vec<usize> {
        self.kicks.lock().unwrap().clone()
    }

    /// How many reschedule requests were made in all (counted in quiet mode too).
    pub fn resched_count(&self) -> u64 {
        self.resched_count.load(Relaxed)
    }

    /// Whether `cpu` was asked to reschedule since the last call (clears the flag).
    pub fn take_resched(&self, cpu: usize) -> bool {
        self.resched.get(cpu).is_some_and(|f| f.swap(false, Relaxed))
    }

    /// The CPUs asked to reschedule since the last call, in order (empties the log).
    pub fn take_resched_log(&self) -> Vec<usize> {
        std::mem::take(&mut *self.resched_log.lock().unwrap())
    }
}

impl Platform for Recorder {
    type Payload = ();
    fn resched_cpu(&self, cpu: usize) {
        if let Some(f) = self.resched.get(cpu) {
            f.store(true, Relaxed);
        }
        self.resched_count.fetch_add(1, Relaxed);
        if self.keep_log {
            self.resched_log.lock().unwrap().push(cpu);
        }
    }

    fn run_stopper(&self, cpu: usize) {
        if self.keep_log {
            self.stoppers.lock().unwrap().push(cpu);
        }
        self.resched_cpu(cpu);
    }

    fn kick_nohz(&self, cpu: usize) {
        if self.keep_log {
            self.kicks.lock().unwrap().push(cpu);
        }
        self.resched_cpu(cpu);
    }

    fn event(&self, e: &Event) {
        if let EventKind::Migrate { .. } = e.kind {
            self.migrations.fetch_add(1, Relaxed);
        }
        if self.keep_log {
            self.events.lock().unwrap().push(*e);
        }
    }
}

/// A machine of `CPUS` CPUs at HZ 250 with a [`Recorder`], its topology built by `build`
/// (e.g. `|t| t.init_clusters(2, 4)`); panics if the topology is refused.
pub fn machine<const CPUS: usize, const TASKS: usize, const Q: usize>(
    features: Features,
    build: impl FnOnce(&mut Topology<CPUS>) -> Result<(), TopologyError>,
) -> Box<Smp<Recorder, CPUS, TASKS, Q>> {
    let m = Box::new(Smp::new(Recorder::new(CPUS), features, 250));
    m.init_with(build).expect("topology");
    m
}

/// Creates a task on `cpu` that stays there (pinned while it is created, so fork placement
/// keeps it on `cpu`, then allowed everywhere).
pub fn spawn_on<P: Platform, const C: usize, const T: usize, const Q: usize>(
    m: &Smp<P, C, T, Q>,
    cpu: usize,
    now: u64,
) -> TaskId {
    let pinned = TaskParams { affinity: CpuMask::single(cpu), ..TaskParams::default() };
    let t = m.create(cpu, now, pinned).expect("create");
    m.set_affinity(now, t, CpuMask::ALL).expect("set_affinity");
    t
}

/// `schedule` then `finish_switch` on `cpu`: what a CPU does at a switch. Returns the task it
/// now runs.
pub fn run_cpu<P: Platform, const C: usize, const T: usize, const Q: usize>(
    m: &Smp<P, C, T, Q>,
    cpu: usize,
    now: u64,
) -> Option<TaskId> {
    let t = m.schedule(cpu, now).unwrap();
    m.finish_switch(cpu, now).unwrap();
    t
}

/// Every CPU runs its idle loop once, CPU `i` at `t0 + i` ms, so each has an idle stamp (later
/// CPUs idled more recently).
pub fn idle_all<P: Platform, const C: usize, const T: usize, const Q: usize>(m: &Smp<P, C, T, Q>, t0: u64) {
    for cpu in 0..m.nr_cpus() {
        run_cpu(m, cpu, t0 + cpu as u64 * MS);
    }
}

/// One millisecond in ns.
pub const MS: u64 = 1_000_000;

/// The one-CPU scheduler the [`Driver`] drives.
pub type Sched = SingleCpu<Recorder, 64, 64>;

/// A deterministic one-CPU driver whose tasks all spin: every tick charges the current task,
/// and a requested reschedule is honoured at once.
pub struct Driver {
    /// The scheduler.
    pub s: Box<Sched>,
    /// The current time (ns).
    pub now: u64,
    /// The tick period (ns).
    pub tick: u64,
}

impl Driver {
    /// Default features, tunables scaled for `cpus_for_tunables` CPUs, a tick every `tick` ns.
    pub fn new(cpus_for_tunables: usize, tick: u64) -> Driver {
        Driver::with(Tunables::for_cpus(cpus_for_tunables), Features::default(), tick)
    }

    /// Given tunables and features.
    pub fn with(t: Tunables, f: Features, tick: u64) -> Driver {
        Driver { s: Box::new(SingleCpu::new(Recorder::new(1), 1024, t, f).expect("tunables")), now: 0, tick }
    }

    /// Creates a spinning task of nice `nice` now and reschedules if asked to.
    pub fn spawn(&mut self, nice: i32) -> TaskId {
        let id = self.s.create(self.now, TaskParams { nice, ..TaskParams::default() }).unwrap();
        self.resched_if_needed();
        id
    }

    /// Calls `schedule` if a reschedule is due or nothing runs.
    pub fn resched_if_needed(&mut self) {
        if self.s.need_resched() || self.s.current().is_none() {
            self.s.schedule(self.now);
        }
    }

    /// Runs `duration` ns of ticks.
    pub fn run(&mut self, duration: u64) {
        let end = self.now + duration;
        while self.now < end {
            self.now += self.tick;
            self.s.tick(self.now);
            self.resched_if_needed();
        }
    }

    /// Runs `step` at a time until `id` is the current task; panics if it is not picked
    /// within `max`, so a task that is never scheduled fails the test instead of hanging.
    pub fn run_until_current(&mut self, id: TaskId, step: u64, max: u64) {
        let start = self.now;
        while self.s.current() != Some(id) {
            assert!(
                self.now - start < max,
                "{id:?} not picked within {max} ns (from {start} to {}; current {:?})",
                self.now,
                self.s.current()
            );
            self.run(step);
        }
    }

    /// CPU time `id` has had (ns).
    pub fn runtime(&self, id: TaskId) -> u64 {
        self.s.entity(id).unwrap().sum_exec_runtime
    }

    /// (time, next) of every context switch so far.
    pub fn switches(&self) -> Vec<(u64, Option<TaskId>)> {
        self.s.platform().switches()
    }
}
