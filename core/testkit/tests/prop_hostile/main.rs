//! Hostile-API property test: random operation sequences mixing valid and invalid input
//! (nice out of range, empty or offline-only affinity, out-of-range and huge CPU numbers,
//! stale and never-issued task ids, operations invalid for the task's state, `schedule`
//! twice without `finish_switch`) against [`Smp`] on four topologies (clusters 2×4,
//! big.LITTLE 4+4, NUMA 2×2×2 on 8 CPUs; a flat 2-CPU machine in an 8-CPU scheduler), with
//! tables small enough that full runqueues and a full task table happen often (4 slots per
//! runqueue; 24 tasks, 12 on the 2-CPU machine).
//!
//! After every call it checks that
//! * the result is the one an oracle predicts from the input and a model of the task set
//!   (success, or one of the typed errors the input calls for; where placement may
//!   legitimately decide either way, either, and the model follows what happened);
//! * a refused call (and a call on an out-of-range CPU) left the state exactly as it was
//!   (a [`Snapshot`] of every task and CPU and the platform's request counts);
//! * a successful call did what it says (e.g. `set_affinity` on a queued task moved it
//!   into its new affinity; `schedule` never runs a task its affinity excludes; a task
//!   switched away from a CPU its affinity excludes leaves it);
//! * `check_invariants` holds, the model's live tasks (blocked / runnable-or-running /
//!   exiting) agree with `state`, and exited ids answer `StaleTask`.
//!
//! A failure does not stop the run: every kind is counted, the first case of each kind is
//! shrunk to a short list of concrete calls, and the test fails at the end with all of them.
//! A call that never returns aborts the run after 120 s with the call (a watchdog).
//!
//! By default the run is small enough for every CI run. `HOSTILE_CALLS=1000000` runs at
//! least that many calls in total (split over the four topologies); `HOSTILE_SEED=<u64>`
//! replays a run (each summary line prints its seed). A summary line per topology shows the
//! calls, the refusals by kind and how many calls met a full runqueue or a full task table.
//!
//! At the end, deterministic regression tests for the known defects D4, D5 and D8.
//!
//! This file runs the test per topology; its parts are beside it: the generated operations and
//! the calls they resolve to (`ops.rs`), the snapshot (`snapshot.rs`), the model and the
//! resolution of arguments against it (`model.rs`), the oracle (`oracle.rs`), the checks after
//! each call (`check.rs`), and a case's run and shrinking with the watchdog (`run.rs`).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use sched_core::task::weight_for;
use sched_core::topology::Topology;
use sched_core::{
    smp::Push, CpuMask, Entity, Event, Features, Platform, Policy, SchedError, SlotId, Smp, TaskId,
    TaskParams, TaskState, TopologyError, WakeFlags, MAX_CPUS,
};
use sched_testkit::{machine, run_cpu, Recorder};

const CPUS: usize = 8;
const Q: usize = 4;
/// The machine under test: `T` tasks at most, `Q` per runqueue.
type M<const T: usize> = Smp<Counting, CPUS, T, Q>;

/// A platform that counts every request and event, so a refused call can be checked to
/// have asked for and reported nothing.
#[derive(Default)]
struct Counting {
    resched: AtomicU64,
    stoppers: AtomicU64,
    kicks: AtomicU64,
    events: AtomicU64,
}

impl Counting {
    fn counts(&self) -> [u64; 4] {
        [&self.resched, &self.stoppers, &self.kicks, &self.events].map(|c| c.load(Relaxed))
    }
}

impl Platform for Counting {
    type Payload = ();
    fn resched_cpu(&self, _cpu: usize) {
        self.resched.fetch_add(1, Relaxed);
    }
    fn run_stopper(&self, _cpu: usize) {
        self.stoppers.fetch_add(1, Relaxed);
    }
    fn kick_nohz(&self, _cpu: usize) {
        self.kicks.fetch_add(1, Relaxed);
    }
    fn event(&self, _event: &Event) {
        self.events.fetch_add(1, Relaxed);
    }
}

/// Calls per topology test when `HOSTILE_CALLS` is not set.
const DEFAULT_CALLS_PER_TOPOLOGY: u64 = 15_000;
/// The topology tests (a long run splits `HOSTILE_CALLS` between them).
const NR_TOPOLOGY_TESTS: u64 = 4;

mod check;
mod model;
mod ops;
mod oracle;
mod run;
mod snapshot;

use check::*;
use model::*;
use ops::*;
use oracle::*;
use run::*;
use snapshot::*;

// ---- what the parts share ----------------------------------------------------------------

#[derive(Debug, Clone)]
struct Failure {
    /// The kind of failure: what is counted and what a shrunk case must reproduce.
    key: String,
    detail: String,
    /// The state may be corrupt or the model lost: the case stops.
    hard: bool,
}

#[derive(Default)]
struct Stats {
    cases: u64,
    calls: u64,
    refusals: BTreeMap<&'static str, u64>,
    /// Calls made while some runqueue was full.
    full_rq: u64,
    /// Calls made while the task table was full.
    full_table: u64,
    /// The most tasks alive at once.
    max_live: usize,
    failures: BTreeMap<String, u64>,
}

struct Topo {
    name: &'static str,
    build: fn(&mut Topology<CPUS>) -> Result<(), TopologyError>,
}

// ---- the test per topology --------------------------------------------------------------

/// A number from the environment (`_` separators allowed), if set and valid.
fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().replace('_', "").parse().ok())
}

static TOTAL_CALLS: AtomicU64 = AtomicU64::new(0);
static TOTAL_FAILURES: AtomicU64 = AtomicU64::new(0);
static TESTS_DONE: AtomicUsize = AtomicUsize::new(0);

/// Runs generated cases on `topo` until the calls' budget is spent; shrinks the first case of
/// each kind of failure and fails with all of them.
fn hostile<const T: usize>(topo: Topo) {
    let _watch = StopWatch(start_watchdog(topo.name));
    let long = env_u64("HOSTILE_CALLS");
    let budget = long.map_or(DEFAULT_CALLS_PER_TOPOLOGY, |c| c.div_ceil(NR_TOPOLOGY_TESTS));
    let seed = env_u64("HOSTILE_SEED")
        .unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64));
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..8 + topo.name.len().min(24)].copy_from_slice(&topo.name.as_bytes()[..topo.name.len().min(24)]);
    let mut runner =
        TestRunner::new_with_rng(Config::default(), TestRng::from_seed(RngAlgorithm::XorShift, &bytes[..16]));
    let strategy = ops();
    let start = Instant::now();
    let mut stats = Stats::default();
    // The first failing case of each kind.
    let mut first: BTreeMap<String, (Vec<Op>, Failure)> = BTreeMap::new();
    while stats.calls < budget {
        let case = strategy.new_tree(&mut runner).expect("a case").current();
        for (_, f) in run_case::<T, Op>(&topo, &case, &mut stats, None, None) {
            first.entry(f.key.clone()).or_insert_with(|| (case.clone(), f));
        }
    }
    let ran_for = start.elapsed();
    let nr_failures: u64 = stats.failures.values().sum();
    println!(
        "prop_hostile[{}]: seed {seed}: {} calls in {} cases ({:.1?}), {nr_failures} failures of {} kinds; \
         refusals {:?}; calls with a full runqueue {}, with a full task table {} (most tasks alive {})",
        topo.name,
        stats.calls,
        stats.cases,
        ran_for,
        stats.failures.len(),
        stats.refusals,
        stats.full_rq,
        stats.full_table,
        stats.max_live,
    );
    TOTAL_CALLS.fetch_add(stats.calls, Relaxed);
    TOTAL_FAILURES.fetch_add(nr_failures, Relaxed);
    if TESTS_DONE.fetch_add(1, Relaxed) + 1 == NR_TOPOLOGY_TESTS as usize {
        println!(
            "prop_hostile: all {NR_TOPOLOGY_TESTS} topologies: {} calls, {} failures",
            TOTAL_CALLS.load(Relaxed),
            TOTAL_FAILURES.load(Relaxed)
        );
    }
    if !first.is_empty() {
        // Shrink the first case of each kind to a short reproducer.
        // Seconds per kind: a failing run may take longer than a passing one, within reason.
        let total = if long.is_some() { Duration::from_secs(120) } else { Duration::from_secs(8) };
        let per_kind = (total / first.len() as u32).min(Duration::from_secs(20));
        let mut report = String::new();
        for (key, (case, f)) in &first {
            // Shrink the concrete calls the case made (removing one does not change what the
            // others refer to), starting without the refused ones, which changed nothing.
            let mut trace = Trace::default();
            run_case::<T, Op>(&topo, case, &mut Stats::default(), Some(key), Some(&mut trace));
            let last = trace.calls.len().saturating_sub(1);
            let accepted: Vec<(Call, u64)> = (0..trace.calls.len())
                .filter(|&i| !trace.refused[i] || i == last)
                .map(|i| trace.calls[i])
                .collect();
            let fails = |c: &[(Call, u64)]| {
                run_case::<T, _>(&topo, c, &mut Stats::default(), Some(key), None)
                    .iter()
                    .any(|(_, g)| &g.key == key)
            };
            let start = if fails(&accepted) { accepted } else { trace.calls };
            let calls = shrink::<T, (Call, u64)>(&topo, &start, key, Instant::now() + per_kind);
            let mut trace = Trace::default();
            let again = run_case::<T, _>(&topo, &calls, &mut Stats::default(), Some(key), Some(&mut trace));
            let detail = again.iter().find(|(_, g)| &g.key == key).map_or(&f.detail, |(_, g)| &g.detail);
            report += &format!(
                "\n=== {key} ({} times)\n{detail}\nreproducer ({} calls, on {}):\n  {}\n",
                stats.failures[key],
                calls.len(),
                topo.name,
                trace.lines.join("\n  ")
            );
        }
        panic!(
            "prop_hostile[{}] (HOSTILE_SEED={seed}): {nr_failures} failures of {} kinds:{report}",
            topo.name,
            first.len()
        );
    }
    assert!(stats.refusals.get("RunQueueFull").copied().unwrap_or(0) > 0, "no RunQueueFull refusal occurred");
    assert!(
        stats.refusals.get("TaskTableFull").copied().unwrap_or(0) > 0,
        "no TaskTableFull refusal occurred"
    );
    assert!(stats.full_rq > 0 && stats.full_table > 0, "full runqueues and a full task table must occur");
}

#[test]
fn hostile_clusters_2x4() {
    hostile::<24>(Topo { name: "clusters 2x4", build: |t| t.init_clusters(2, 4) });
}

#[test]
fn hostile_big_little_4_4() {
    hostile::<24>(Topo { name: "big.LITTLE 4+4", build: |t| t.init_big_little(4, 4, 446) });
}

#[test]
fn hostile_numa_2x2x2() {
    hostile::<24>(Topo { name: "numa 2x2x2", build: |t| t.init_numa(2, 2, 2) });
}

#[test]
fn hostile_flat_2() {
    hostile::<12>(Topo { name: "flat 2 of 8", build: |t| t.init_flat(2) });
}

// ---- regression tests for the known defects ---------------------------------------------------

/// D4: `set_affinity` onto CPUs whose runqueues are all full must not return Ok and leave
/// the task queued on a CPU outside its new affinity: it either moves the task or refuses
/// with `RunQueueFull` and changes nothing.
#[test]
fn d4_set_affinity_onto_full_cpus_moves_or_refuses() {
    let m: Box<Smp<Recorder, 2, 16, 8>> = machine(Features::default(), |t| t.init_flat(2));
    let on0 = TaskParams { affinity: CpuMask::single(0), ..TaskParams::default() };
    let a = m.create(0, 1_000, on0).unwrap();
    let b = m.create(0, 1_000, on0).unwrap();
    let running = run_cpu(&*m, 0, 1_000).unwrap();
    let victim = if running == a { b } else { a };
    for _ in 0..8 {
        m.create(1, 1_000, TaskParams { affinity: CpuMask::single(1), ..TaskParams::default() }).unwrap();
    }
    assert!(!m.with_cpu(1, |st| st.rq.has_room()).unwrap(), "CPU 1 is full");
    let before = m.entity(victim).unwrap();
    let r = m.set_affinity(2_000, victim, CpuMask::single(1));
    match r {
        Ok(()) => {
            assert_eq!(m.task_cpu(victim), Ok(1), "set_affinity returned Ok but left the task on CPU 0")
        }
        Err(e) => {
            assert_eq!(e, SchedError::RunQueueFull);
            assert_eq!(m.task_cpu(victim), Ok(0));
            assert_eq!(m.entity(victim).unwrap().affinity, before.affinity, "refused but changed affinity");
        }
    }
    m.check_invariants().unwrap();
}

/// D5: `schedule` twice without `finish_switch` in between (which the API tolerates) must
/// still push a task away from a CPU its new affinity excludes: it never runs there again.
#[test]
fn d5_schedule_twice_keeps_affinity_push() {
    let m: Box<Smp<Recorder, 2, 16, 8>> = machine(Features::default(), |t| t.init_flat(2));
    let t = m.create(0, 1_000, TaskParams { affinity: CpuMask::single(0), ..TaskParams::default() }).unwrap();
    assert_eq!(run_cpu(&*m, 0, 1_000), Some(t));
    m.set_affinity(2_000, t, CpuMask::single(1)).unwrap();
    let first = m.schedule(0, 3_000).unwrap();
    let second = m.schedule(0, 4_000).unwrap();
    m.finish_switch(0, 4_000).unwrap();
    assert_ne!(first, Some(t), "switched away from the task");
    assert_ne!(second, Some(t), "the second schedule ran the task on CPU 0, outside its affinity {{1}}");
    assert_ne!(m.current(0), Some(t));
    m.check_invariants().unwrap();
    assert_eq!(m.task_cpu(t), Ok(1), "the task was not pushed to CPU 1");
}

/// D8: `create` must not fail with `RunQueueFull` when fork placement picks a full
/// runqueue while another allowed CPU has room.
#[test]
fn d8_create_succeeds_when_an_allowed_cpu_has_room() {
    let m: Box<Smp<Recorder, 2, 16, 3>> = machine(Features::default(), |t| t.init_flat(2));
    // Both CPUs busy; CPU 1 is full (3 of 3) but lightly loaded, CPU 0 heavily loaded with
    // room for one more: fork placement prefers the lighter CPU 1.
    let pinned = |nice, cpu| TaskParams { nice, affinity: CpuMask::single(cpu), ..TaskParams::default() };
    for _ in 0..2 {
        m.create(0, 1_000, pinned(-20, 0)).unwrap();
    }
    for _ in 0..3 {
        m.create(1, 1_000, pinned(19, 1)).unwrap();
    }
    assert!(m.with_cpu(0, |st| st.rq.has_room()).unwrap(), "CPU 0 has room");
    assert!(!m.with_cpu(1, |st| st.rq.has_room()).unwrap(), "CPU 1 is full");
    let t = m.create(0, 2_000, TaskParams::default()).expect("CPU 0 has room, so create must succeed");
    assert_eq!(m.task_cpu(t), Ok(0));
    m.check_invariants().unwrap();
}
