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

// ---- generated operations ---------------------------------------------------------------

/// A CPU argument; resolved against the number of online CPUs `n`.
#[derive(Debug, Clone, Copy)]
enum CpuArg {
    /// CPU `k % n`.
    Online(u8),
    /// `n + k % 4`: just past the last online CPU.
    PastEnd(u8),
    /// `CPUS`: past the end of the scheduler's arrays.
    ArrayEnd,
    /// `usize::MAX`.
    Huge,
    /// `2^32 + 1` (1 when truncated to 32 bits).
    Wrap1,
    /// `2^32` (0 when truncated to 32 bits).
    Wrap0,
}

/// An affinity-mask argument; some are resolved against the state before the call.
#[derive(Debug, Clone, Copy)]
enum MaskArg {
    All,
    Single(u8),
    /// Bit `c % 8` of the byte selects online CPU `c` (may come out empty).
    Bits(u8),
    Empty,
    /// Only CPUs that are not online (`n..MAX_CPUS`).
    OfflineOnly,
    /// One online CPU plus offline ones.
    OnlinePlusOffline(u8),
    /// The online CPUs whose runqueue is full, except the task's own (else like `Away`).
    FullCpus(u8),
    /// One online CPU other than the task's own.
    Away(u8),
}

/// A task argument; resolved against the model and the state before the call.
#[derive(Debug, Clone, Copy)]
enum TaskArg {
    /// The current task of CPU `k % n` (else its switching-out task, else like `Live`).
    Current(u8),
    /// A live task of the model.
    Live(u8),
    /// A runnable task waiting on a timeline (else like `Live`).
    Queued(u8),
    /// A blocked task (else like `Live`).
    Blocked(u8),
    /// An id of a task that has exited (else like `Never`).
    Exited(u8),
    /// An id never issued.
    Never(u8),
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Create {
        cpu: CpuArg,
        nice: i32,
        policy: u8,
        mask: MaskArg,
    },
    /// `cpu: None`: the task's own CPU.
    Block {
        task: TaskArg,
        cpu: Option<CpuArg>,
    },
    /// `flags: None`: `wake`; else `wake_with` those flag bits.
    Wake {
        task: TaskArg,
        cpu: CpuArg,
        flags: Option<u8>,
    },
    Exit {
        task: TaskArg,
    },
    /// `cpu: None`: the task's own CPU.
    Exec {
        task: TaskArg,
        cpu: Option<CpuArg>,
    },
    SetNice {
        task: TaskArg,
        nice: i32,
    },
    SetAffinity {
        task: TaskArg,
        mask: MaskArg,
    },
    Yield {
        cpu: CpuArg,
    },
    Tick {
        cpu: CpuArg,
        dt: u32,
    },
    /// `schedule`, then `finish_switch` if `finish`.
    Schedule {
        cpu: CpuArg,
        dt: u32,
        finish: bool,
    },
    FinishSwitch {
        cpu: CpuArg,
    },
}

fn cpu_arg() -> impl Strategy<Value = CpuArg> {
    prop_oneof![
        44 => any::<u8>().prop_map(CpuArg::Online),
        1 => any::<u8>().prop_map(CpuArg::PastEnd),
        1 => Just(CpuArg::ArrayEnd),
        1 => Just(CpuArg::Huge),
        1 => Just(CpuArg::Wrap1),
        1 => Just(CpuArg::Wrap0),
    ]
}

fn mask_arg() -> impl Strategy<Value = MaskArg> {
    prop_oneof![
        6 => Just(MaskArg::All),
        5 => any::<u8>().prop_map(MaskArg::Single),
        3 => any::<u8>().prop_map(MaskArg::Bits),
        1 => Just(MaskArg::Empty),
        1 => Just(MaskArg::OfflineOnly),
        1 => any::<u8>().prop_map(MaskArg::OnlinePlusOffline),
        3 => any::<u8>().prop_map(MaskArg::FullCpus),
        3 => any::<u8>().prop_map(MaskArg::Away),
    ]
}

fn nice_arg() -> impl Strategy<Value = i32> {
    prop_oneof![
        12 => -20i32..=19,
        1 => prop::sample::select(vec![-21, 20, i32::MIN, i32::MAX, -1000, 1000]),
    ]
}

/// Task arguments with the given weights for (current, live, queued, blocked, exited, never).
fn task_arg(w: [u32; 6]) -> impl Strategy<Value = TaskArg> {
    prop_oneof![
        w[0] => any::<u8>().prop_map(TaskArg::Current),
        w[1] => any::<u8>().prop_map(TaskArg::Live),
        w[2] => any::<u8>().prop_map(TaskArg::Queued),
        w[3] => any::<u8>().prop_map(TaskArg::Blocked),
        w[4] => any::<u8>().prop_map(TaskArg::Exited),
        w[5] => any::<u8>().prop_map(TaskArg::Never),
    ]
}

/// Operations, with weights for block, wake and exit (a "sleepy" mix lets blocked tasks
/// pile up so the task table fills even on two CPUs).
fn op(block: u32, wake: u32, exit: u32) -> impl Strategy<Value = Op> {
    let own_cpu = prop_oneof![9 => Just(None), 1 => cpu_arg().prop_map(Some)];
    prop_oneof![
        14 => (cpu_arg(), nice_arg(), 0u8..3, mask_arg())
            .prop_map(|(cpu, nice, policy, mask)| Op::Create { cpu, nice, policy, mask }),
        block => (task_arg([12, 2, 1, 1, 1, 1]), own_cpu.clone()).prop_map(|(task, cpu)| Op::Block { task, cpu }),
        wake => (task_arg([1, 2, 1, 10, 1, 1]), cpu_arg(), prop_oneof![3 => Just(None), 1 => (0u8..4).prop_map(Some)])
            .prop_map(|(task, cpu, flags)| Op::Wake { task, cpu, flags }),
        exit => task_arg([3, 4, 2, 2, 1, 1]).prop_map(|task| Op::Exit { task }),
        3 => (task_arg([8, 2, 1, 1, 1, 1]), own_cpu).prop_map(|(task, cpu)| Op::Exec { task, cpu }),
        3 => (task_arg([2, 6, 2, 2, 1, 1]), nice_arg()).prop_map(|(task, nice)| Op::SetNice { task, nice }),
        7 => (task_arg([3, 3, 6, 2, 1, 1]), mask_arg()).prop_map(|(task, mask)| Op::SetAffinity { task, mask }),
        2 => cpu_arg().prop_map(|cpu| Op::Yield { cpu }),
        6 => (cpu_arg(), 0u32..4_000_000).prop_map(|(cpu, dt)| Op::Tick { cpu, dt }),
        12 => (cpu_arg(), 0u32..2_000_000, prop::bool::weighted(0.8))
            .prop_map(|(cpu, dt, finish)| Op::Schedule { cpu, dt, finish }),
        3 => cpu_arg().prop_map(|cpu| Op::FinishSwitch { cpu }),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop_oneof![
        3 => prop::collection::vec(op(9, 8, 4), 50..600),
        1 => prop::collection::vec(op(12, 3, 1), 50..600),
    ]
}

// ---- resolved calls -----------------------------------------------------------------------

/// One API call with concrete arguments.
#[derive(Debug, Clone, Copy)]
enum Call {
    Create { cpu: usize, params: TaskParams },
    Block { cpu: usize, id: TaskId },
    Wake { cpu: usize, id: TaskId, flags: Option<WakeFlags> },
    Exit { id: TaskId },
    Exec { cpu: usize, id: TaskId },
    SetNice { id: TaskId, nice: i32 },
    SetAffinity { id: TaskId, mask: CpuMask },
    Yield { cpu: usize },
    Tick { cpu: usize },
    Schedule { cpu: usize, finish: bool },
    FinishSwitch { cpu: usize },
}

impl Call {
    fn name(&self) -> &'static str {
        match self {
            Call::Create { .. } => "create",
            Call::Block { .. } => "block",
            Call::Wake { flags: None, .. } => "wake",
            Call::Wake { .. } => "wake_with",
            Call::Exit { .. } => "exit",
            Call::Exec { .. } => "exec",
            Call::SetNice { .. } => "set_nice",
            Call::SetAffinity { .. } => "set_affinity",
            Call::Yield { .. } => "yield_now",
            Call::Tick { .. } => "tick",
            Call::Schedule { finish: true, .. } => "schedule+finish_switch",
            Call::Schedule { .. } => "schedule (no finish_switch)",
            Call::FinishSwitch { .. } => "finish_switch",
        }
    }

    /// The CPU argument, if the call has one.
    fn cpu(&self) -> Option<usize> {
        match *self {
            Call::Create { cpu, .. }
            | Call::Block { cpu, .. }
            | Call::Wake { cpu, .. }
            | Call::Exec { cpu, .. }
            | Call::Yield { cpu }
            | Call::Tick { cpu }
            | Call::Schedule { cpu, .. }
            | Call::FinishSwitch { cpu } => Some(cpu),
            Call::Exit { .. } | Call::SetNice { .. } | Call::SetAffinity { .. } => None,
        }
    }

    fn id(&self) -> Option<TaskId> {
        match *self {
            Call::Block { id, .. }
            | Call::Wake { id, .. }
            | Call::Exit { id }
            | Call::Exec { id, .. }
            | Call::SetNice { id, .. }
            | Call::SetAffinity { id, .. } => Some(id),
            _ => None,
        }
    }
}

/// What a call returned.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Out {
    Unit,
    Id(TaskId),
    Cpu(usize),
    Pick(Option<TaskId>),
    Bool(bool),
}

fn execute<const T: usize>(m: &M<T>, now: u64, call: Call) -> Result<Out, SchedError> {
    match call {
        Call::Create { cpu, params } => m.create(cpu, now, params).map(Out::Id),
        Call::Block { cpu, id } => m.block(cpu, now, id).map(|_| Out::Unit),
        Call::Wake { cpu, id, flags: None } => m.wake(cpu, now, id).map(Out::Cpu),
        Call::Wake { cpu, id, flags: Some(f) } => m.wake_with(cpu, now, id, f).map(Out::Cpu),
        Call::Exit { id } => m.exit(now, id).map(|_| Out::Unit),
        Call::Exec { cpu, id } => m.exec(cpu, now, id).map(Out::Cpu),
        Call::SetNice { id, nice } => m.set_nice(now, id, nice).map(|_| Out::Unit),
        Call::SetAffinity { id, mask } => m.set_affinity(now, id, mask).map(|_| Out::Unit),
        Call::Yield { cpu } => m.yield_now(cpu, now).map(|()| Out::Unit),
        Call::Tick { cpu } => m.tick(cpu, now).map(Out::Bool),
        Call::Schedule { cpu, finish } => {
            let next = m.schedule(cpu, now)?;
            if finish {
                m.finish_switch(cpu, now)?;
            }
            Ok(Out::Pick(next))
        }
        Call::FinishSwitch { cpu } => m.finish_switch(cpu, now).map(|_| Out::Unit),
    }
}

// ---- snapshot -------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
struct TaskSnap {
    id: TaskId,
    state: TaskState,
    cpu: usize,
    entity: Entity,
}

#[derive(Debug, Clone, PartialEq)]
struct CpuSnap {
    nr_running: u32,
    curr: Option<TaskId>,
    switching_out: Option<TaskId>,
    /// Every task in the arena (queued, current, switching out), by slot.
    attached: Vec<(SlotId, TaskId)>,
    queued: Vec<TaskId>,
    has_room: bool,
    need_resched: bool,
    clock: u64,
    min_vruntime: u64,
    load_weight: u64,
    push: [Option<Push>; 2],
    active_balance: bool,
}

/// Everything a refused call must leave as it was.
#[derive(Debug, Clone, PartialEq)]
struct Snapshot {
    nr_tasks: usize,
    tasks: Vec<TaskSnap>,
    cpus: Vec<CpuSnap>,
    /// Platform requests and events so far: resched, stopper, nohz kick, event.
    platform: [u64; 4],
}

impl Snapshot {
    fn task(&self, id: TaskId) -> Option<&TaskSnap> {
        self.tasks.iter().find(|t| t.id == id)
    }

    /// Whether `id` is current or being switched out on its CPU (its context is live).
    fn busy(&self, id: TaskId) -> bool {
        self.cpus.iter().any(|c| c.curr == Some(id) || c.switching_out == Some(id))
    }

    fn room_in(&self, mask: &CpuMask) -> bool {
        self.cpus.iter().enumerate().any(|(c, s)| mask.contains(c) && s.has_room)
    }

    /// Room for task `id` on a CPU of `mask`: a free slot, or one already reserved for it
    /// (a pending push).
    fn room_for(&self, id: TaskId, mask: &CpuMask) -> bool {
        let reserved = self
            .cpus
            .iter()
            .flat_map(|c| c.push.iter().flatten())
            .any(|p| p.task == id && mask.contains(p.dst as usize));
        reserved || self.room_in(mask)
    }

    /// The first difference from `other`, for failure messages.
    fn diff(&self, other: &Snapshot) -> String {
        if self.nr_tasks != other.nr_tasks {
            return format!("nr_tasks {} -> {}", self.nr_tasks, other.nr_tasks);
        }
        for (a, b) in self.tasks.iter().zip(&other.tasks) {
            if a != b {
                return format!("task before {a:?}\n  after {b:?}");
            }
        }
        if self.tasks.len() != other.tasks.len() {
            return format!("tasks {:?} -> {:?}", self.tasks, other.tasks);
        }
        for (c, (a, b)) in self.cpus.iter().zip(&other.cpus).enumerate() {
            if a != b {
                return format!("cpu {c} before {a:?}\n  after {b:?}");
            }
        }
        format!(
            "platform requests/events (resched, stopper, kick, event) {:?} -> {:?}",
            self.platform, other.platform
        )
    }
}

/// A task's entity, from the runqueue that holds it or else (asleep) from the task table.
/// Unlike `Smp::entity` it does not wait for a task in transit, which would hang the test.
fn entity_of<const T: usize>(m: &M<T>, id: TaskId) -> Result<Entity, SchedError> {
    let state = m.state(id)?;
    for c in 0..m.nr_cpus() {
        let found = m.with_cpu(c, |st| st.rq.attached().any(|(_, t)| t == id));
        if found == Ok(true) {
            // Attached there: it cannot be in transit, so this does not wait.
            return m.entity(id);
        }
    }
    match state {
        TaskState::Blocked => m.entity(id),
        state => Err(SchedError::InvalidState { task: id, state }),
    }
}

fn snapshot<const T: usize>(m: &M<T>, model: &Model) -> Snapshot {
    let n = m.nr_cpus();
    let cpus: Vec<CpuSnap> = (0..n)
        .map(|c| {
            m.with_cpu(c, |st| {
                let rq = &st.rq;
                let id_at = |node: Option<SlotId>| node.and_then(|n| rq.task_at(n));
                CpuSnap {
                    nr_running: rq.nr_running(),
                    curr: rq.curr_id(),
                    switching_out: id_at(rq.switching_out_slot()),
                    attached: rq.attached().collect(),
                    queued: rq.timeline_ids().collect(),
                    has_room: rq.has_room(),
                    need_resched: rq.need_resched(),
                    clock: rq.clock(),
                    min_vruntime: rq.min_vruntime(),
                    load_weight: rq.load_weight(),
                    push: st.push,
                    active_balance: st.active_balance,
                }
            })
            .expect("online cpu")
        })
        .collect();
    let mut ids: BTreeSet<TaskId> = model.live.keys().copied().collect();
    ids.extend(cpus.iter().flat_map(|c| c.attached.iter().map(|&(_, id)| id)));
    let tasks = ids
        .into_iter()
        .filter_map(|id| {
            Some(TaskSnap {
                id,
                state: m.state(id).ok()?,
                cpu: m.task_cpu(id).ok()?,
                entity: entity_of(m, id).ok()?,
            })
        })
        .collect();
    Snapshot { nr_tasks: m.nr_tasks(), tasks, cpus, platform: m.platform().counts() }
}

// ---- model ----------------------------------------------------------------------------------

/// What the model expects of a live task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Runnable or Running.
    Active,
    Blocked,
    /// Exited while its CPU still runs it or switches away from it.
    Exiting,
}

#[derive(Default)]
struct Model {
    /// The task table's capacity.
    tasks: usize,
    live: BTreeMap<TaskId, Class>,
    /// Ids of exited tasks, in the order they left, and as a set.
    exited: Vec<TaskId>,
    exited_set: BTreeSet<TaskId>,
    /// Per slot, the highest generation issued.
    max_gen: BTreeMap<u32, u32>,
}

impl Model {
    fn issued(&self, id: TaskId) -> bool {
        self.live.contains_key(&id) || self.exited_set.contains(&id)
    }

    /// The error an id calls for, if it does not name a live task.
    fn id_error(&self, id: TaskId) -> Option<SchedError> {
        if self.live.contains_key(&id) {
            None
        } else if self.exited_set.contains(&id) {
            Some(SchedError::StaleTask(id))
        } else {
            Some(SchedError::UnknownTask(id))
        }
    }

    fn nth_live(&self, k: u8, filter: impl Fn(TaskId, Class) -> bool) -> Option<TaskId> {
        let v: Vec<TaskId> = self.live.iter().filter(|(&id, &c)| filter(id, c)).map(|(&id, _)| id).collect();
        (!v.is_empty()).then(|| v[k as usize % v.len()])
    }

    fn never(&self, k: u8) -> TaskId {
        let slot = k as u32 % self.tasks as u32;
        match k % 4 {
            0 => TaskId::new(self.tasks as u32 + k as u32, 0),
            1 => TaskId::new(u32::MAX, u32::MAX),
            2 => TaskId::new(slot, self.max_gen.get(&slot).map_or(0, |g| g + 1)),
            _ => TaskId::new(slot, u32::MAX - k as u32),
        }
    }

    fn exit(&mut self, id: TaskId) {
        self.live.remove(&id);
        self.exited.push(id);
        self.exited_set.insert(id);
    }
}

fn resolve_cpu(a: CpuArg, n: usize) -> usize {
    match a {
        CpuArg::Online(k) => k as usize % n,
        CpuArg::PastEnd(k) => n + k as usize % 4,
        CpuArg::ArrayEnd => CPUS,
        CpuArg::Huge => usize::MAX,
        CpuArg::Wrap1 => (1usize << 32) + 1,
        CpuArg::Wrap0 => 1usize << 32,
    }
}

fn resolve_task(a: TaskArg, model: &Model, pre: &Snapshot) -> TaskId {
    let state = |id: TaskId| pre.task(id).map(|t| t.state);
    let live = |k| model.nth_live(k, |_, _| true).unwrap_or_else(|| model.never(k));
    match a {
        TaskArg::Current(k) => {
            let c = &pre.cpus[k as usize % pre.cpus.len()];
            c.curr.or(c.switching_out).unwrap_or_else(|| live(k))
        }
        TaskArg::Live(k) => live(k),
        TaskArg::Queued(k) => model
            .nth_live(k, |id, _| state(id) == Some(TaskState::Runnable) && !pre.busy(id))
            .unwrap_or_else(|| live(k)),
        TaskArg::Blocked(k) => model.nth_live(k, |_, c| c == Class::Blocked).unwrap_or_else(|| live(k)),
        TaskArg::Exited(k) if !model.exited.is_empty() => model.exited[k as usize % model.exited.len()],
        TaskArg::Exited(k) | TaskArg::Never(k) => model.never(k),
    }
}

fn resolve_mask(a: MaskArg, n: usize, pre: &Snapshot, task_cpu: Option<usize>) -> CpuMask {
    let away = |k: u8| {
        let own = task_cpu.unwrap_or(0);
        if n < 2 {
            CpuMask::single(own)
        } else {
            CpuMask::single((own + 1 + k as usize % (n - 1)) % n)
        }
    };
    match a {
        MaskArg::All => CpuMask::ALL,
        MaskArg::Single(k) => CpuMask::single(k as usize % n),
        MaskArg::Bits(b) => (0..n).filter(|c| b & (1 << (c % 8)) != 0).collect(),
        MaskArg::Empty => CpuMask::EMPTY,
        MaskArg::OfflineOnly => CpuMask::range(n, MAX_CPUS),
        MaskArg::OnlinePlusOffline(k) => CpuMask::single(k as usize % n).with(n).with(MAX_CPUS - 1),
        MaskArg::FullCpus(k) => {
            let m: CpuMask = pre
                .cpus
                .iter()
                .enumerate()
                .filter(|&(c, s)| !s.has_room && Some(c) != task_cpu)
                .map(|(c, _)| c)
                .collect();
            if m.is_empty() {
                away(k)
            } else {
                m
            }
        }
        MaskArg::Away(k) => away(k),
    }
}

fn resolve(op: Op, model: &Model, pre: &Snapshot, n: usize) -> (Call, u64) {
    let task_cpu = |id: TaskId| pre.task(id).map(|t| t.cpu);
    let own = |id: TaskId, cpu: Option<CpuArg>| match cpu {
        Some(a) => resolve_cpu(a, n),
        None => task_cpu(id).unwrap_or(0),
    };
    match op {
        Op::Create { cpu, nice, policy, mask } => {
            let policy = [Policy::Normal, Policy::Batch, Policy::Idle][policy as usize % 3];
            let affinity = resolve_mask(mask, n, pre, None);
            (Call::Create { cpu: resolve_cpu(cpu, n), params: TaskParams { nice, policy, affinity } }, 0)
        }
        Op::Block { task, cpu } => {
            let id = resolve_task(task, model, pre);
            (Call::Block { cpu: own(id, cpu), id }, 0)
        }
        Op::Wake { task, cpu, flags } => {
            let id = resolve_task(task, model, pre);
            let flags = flags.map(WakeFlags::from_bits_truncate);
            (Call::Wake { cpu: resolve_cpu(cpu, n), id, flags }, 0)
        }
        Op::Exit { task } => (Call::Exit { id: resolve_task(task, model, pre) }, 0),
        Op::Exec { task, cpu } => {
            let id = resolve_task(task, model, pre);
            (Call::Exec { cpu: own(id, cpu), id }, 0)
        }
        Op::SetNice { task, nice } => (Call::SetNice { id: resolve_task(task, model, pre), nice }, 0),
        Op::SetAffinity { task, mask } => {
            let id = resolve_task(task, model, pre);
            (Call::SetAffinity { id, mask: resolve_mask(mask, n, pre, task_cpu(id)) }, 0)
        }
        Op::Yield { cpu } => (Call::Yield { cpu: resolve_cpu(cpu, n) }, 0),
        Op::Tick { cpu, dt } => (Call::Tick { cpu: resolve_cpu(cpu, n) }, dt as u64),
        Op::Schedule { cpu, dt, finish } => (Call::Schedule { cpu: resolve_cpu(cpu, n), finish }, dt as u64),
        Op::FinishSwitch { cpu } => (Call::FinishSwitch { cpu: resolve_cpu(cpu, n) }, 0),
    }
}

// ---- the oracle ---------------------------------------------------------------------------------

/// What a call may return.
struct Expect {
    /// Success is acceptable.
    ok: bool,
    /// Errors that are acceptable (`CpuOutOfRange` is matched by kind; its payload is
    /// checked separately).
    errs: Vec<SchedError>,
}

impl Expect {
    fn ok() -> Expect {
        Expect { ok: true, errs: Vec::new() }
    }
    fn err(errs: Vec<SchedError>) -> Expect {
        Expect { ok: false, errs }
    }
    fn accepts(&self, e: &SchedError) -> bool {
        self.errs.iter().any(|x| match (x, e) {
            (SchedError::CpuOutOfRange(_), SchedError::CpuOutOfRange(_)) => true,
            _ => x == e,
        })
    }
}

fn nice_ok(nice: i32) -> bool {
    (-20..=19).contains(&nice)
}

/// Predicts what `call` may return, from the input, the state before it and the model.
fn oracle(call: &Call, pre: &Snapshot, model: &Model, n: usize) -> Expect {
    let online = CpuMask::first_n(n);
    let mut input: Vec<SchedError> = Vec::new();
    if let Some(cpu) = call.cpu().filter(|&c| c >= n) {
        input.push(SchedError::CpuOutOfRange(cpu));
    }
    match *call {
        Call::Create { params, .. } => {
            if !nice_ok(params.nice) {
                input.push(SchedError::InvalidNice(params.nice));
            }
            if params.affinity.is_empty() {
                input.push(SchedError::EmptyAffinity);
            } else if !params.affinity.intersects(&online) {
                input.push(SchedError::AffinityNotOnline);
            }
        }
        Call::SetNice { nice, .. } if !nice_ok(nice) => input.push(SchedError::InvalidNice(nice)),
        Call::SetAffinity { mask, .. } if mask.is_empty() => input.push(SchedError::EmptyAffinity),
        Call::SetAffinity { mask, .. } if !mask.intersects(&online) => {
            input.push(SchedError::AffinityNotOnline)
        }
        _ => {}
    }
    if let Some(e) = call.id().and_then(|id| model.id_error(id)) {
        input.push(e);
    }
    if !input.is_empty() {
        return Expect::err(input);
    }
    // The input is well formed and names a live task (if any): what the task's state and
    // the room left allow.
    let task = call.id().map(|id| pre.task(id).expect("a live task is in the snapshot"));
    let invalid_state = |t: &TaskSnap| SchedError::InvalidState { task: t.id, state: t.state };
    match *call {
        Call::Create { params, .. } => {
            let room = pre.room_in(&params.affinity.and(&online));
            match (pre.nr_tasks >= model.tasks, room) {
                (true, true) => Expect::err(vec![SchedError::TaskTableFull]),
                (true, false) => Expect::err(vec![SchedError::TaskTableFull, SchedError::RunQueueFull]),
                (false, false) => Expect::err(vec![SchedError::RunQueueFull]),
                (false, true) => Expect::ok(),
            }
        }
        Call::Block { cpu, .. } => {
            let t = task.unwrap();
            if t.state == TaskState::Running && t.cpu == cpu {
                Expect::ok()
            } else {
                Expect::err(vec![invalid_state(t)])
            }
        }
        Call::Wake { .. } => {
            let t = task.unwrap();
            let allowed = t.entity.affinity.and(&online);
            if t.state != TaskState::Blocked {
                Expect::err(vec![invalid_state(t)])
            } else if pre.busy(t.id) && allowed.contains(t.cpu) {
                // Still on its CPU: it is requeued there.
                Expect::ok()
            } else if pre.room_for(t.id, &allowed) {
                Expect::ok()
            } else {
                // Asleep with no allowed CPU with room, or still on a CPU its affinity
                // excludes with nowhere to be pushed to.
                Expect::err(vec![SchedError::RunQueueFull])
            }
        }
        Call::Exit { .. } => {
            let t = task.unwrap();
            if t.state == TaskState::Exiting {
                Expect::err(vec![invalid_state(t)])
            } else {
                Expect::ok()
            }
        }
        Call::Exec { cpu, id } => {
            let t = task.unwrap();
            if pre.cpus[cpu].curr == Some(id) && t.entity.on_rq {
                Expect::ok()
            } else {
                Expect::err(vec![invalid_state(t)])
            }
        }
        Call::SetNice { .. } => {
            let t = task.unwrap();
            if t.state == TaskState::Exiting {
                Expect { ok: true, errs: vec![invalid_state(t)] }
            } else {
                Expect::ok()
            }
        }
        Call::SetAffinity { mask, id } => {
            let t = task.unwrap();
            let allowed = mask.and(&online);
            let room = pre.room_for(id, &allowed);
            if t.state == TaskState::Exiting {
                Expect { ok: true, errs: vec![invalid_state(t)] }
            } else if allowed.contains(t.cpu) || !pre.cpus.iter().any(|c| c.attached_id(id)) {
                // Stays where it is, or sleeps parked (it is placed when it wakes).
                Expect::ok()
            } else if pre.busy(id) && !t.entity.on_rq {
                // Blocked, its CPU still switching away from it: it is placed when it wakes,
                // so it needs no room now; refusing when there is none is conservative (a
                // wakeup before the switch would need it).
                Expect { ok: true, errs: if room { vec![] } else { vec![SchedError::RunQueueFull] } }
            } else if room {
                // Queued on a CPU it may no longer use: it must move now; running there: it
                // moves once switched out.
                Expect::ok()
            } else {
                Expect::err(vec![SchedError::RunQueueFull])
            }
        }
        Call::Yield { .. } | Call::Tick { .. } | Call::Schedule { .. } | Call::FinishSwitch { .. } => {
            Expect::ok()
        }
    }
}

impl CpuSnap {
    fn attached_id(&self, id: TaskId) -> bool {
        self.attached.iter().any(|&(_, t)| t == id)
    }
}

fn err_kind(e: &SchedError) -> &'static str {
    match e {
        SchedError::InvalidNice(_) => "InvalidNice",
        SchedError::EmptyAffinity => "EmptyAffinity",
        SchedError::AffinityNotOnline => "AffinityNotOnline",
        SchedError::TaskTableFull => "TaskTableFull",
        SchedError::RunQueueFull => "RunQueueFull",
        SchedError::UnknownTask(_) => "UnknownTask",
        SchedError::StaleTask(_) => "StaleTask",
        SchedError::InvalidState { .. } => "InvalidState",
        SchedError::CpuOutOfRange(_) => "CpuOutOfRange",
        SchedError::InvalidTunable(_) => "InvalidTunable",
        SchedError::CpuNotUp(_) => "CpuNotUp",
        SchedError::Reentered(_) => "Reentered",
        SchedError::ZeroTime => "ZeroTime",
        SchedError::SwitchPending(_) => "SwitchPending",
        SchedError::NoSwitchPicked(_) => "NoSwitchPicked",
        SchedError::NotInitialised => "NotInitialised",
        SchedError::Group(_) => "Group",
        #[cfg(feature = "eevdf")]
        SchedError::InvalidSlice(_) => "InvalidSlice",
    }
}

fn kinds(errs: &[SchedError]) -> String {
    let v: Vec<&str> = errs.iter().map(err_kind).collect();
    v.join("|")
}

// ---- running a case ------------------------------------------------------------------------------

const SET_AFFINITY_LEFT_OUTSIDE: &str = "set_affinity: Ok but the queued task stays outside its new affinity";

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

/// Checks one call's result and effects; pushes what is wrong onto `fails`.
#[allow(clippy::too_many_arguments)]
fn check_call<const T: usize>(
    m: &M<T>,
    n: usize,
    call: &Call,
    res: &Result<Out, SchedError>,
    pre: &Snapshot,
    model: &mut Model,
    fails: &mut Vec<Failure>,
) {
    let name = label(call, pre);
    let name = name.as_str();
    let mut fail = |key: String, detail: String, hard: bool| fails.push(Failure { key, detail, hard });
    let online = CpuMask::first_n(n);
    let expect = oracle(call, pre, model, n);
    match res {
        Err(e) => {
            if !expect.accepts(e) {
                let key = if expect.ok && expect.errs.is_empty() {
                    format!("{name}: refused a valid call with {}", err_kind(e))
                } else {
                    format!("{name}: {} instead of {}", err_kind(e), kinds(&expect.errs))
                };
                let detail = format!("got {e:?}, expected ok={} or {:?}", expect.ok, expect.errs);
                fail(key, detail, false);
            }
            if let (SchedError::CpuOutOfRange(x), Some(cpu)) = (e, call.cpu()) {
                if *x != cpu {
                    let key = format!("{name}: CpuOutOfRange payload is not the cpu passed");
                    fail(key, format!("cpu {cpu} (online {n}) refused as {e:?}"), false);
                }
            }
            let post = snapshot(m, model);
            if post != *pre {
                fail(format!("{name}: refusal {} changed state", err_kind(e)), pre.diff(&post), true);
            }
            return;
        }
        Ok(o) if !expect.ok => {
            let mut key = format!("{name}: accepted, expected {}", kinds(&expect.errs));
            let mut detail = format!("returned {o:?}, expected {:?}", expect.errs);
            if let Call::SetAffinity { id, mask } = *call {
                let cpu = m.task_cpu(id);
                if pre.busy(id) {
                    key = "set_affinity: Ok for a running task though every allowed CPU is full".into();
                    detail += &format!("; {id:?} runs on CPU {cpu:?}, new mask {mask:?}");
                } else if !cpu.is_ok_and(|c| mask.contains(c)) {
                    key = format!("{SET_AFFINITY_LEFT_OUTSIDE} (every allowed CPU full)");
                    detail += &format!(
                        "; {id:?} was queued on CPU {:?}, is now on {cpu:?}, new mask {mask:?}",
                        pre.task(id).map(|t| t.cpu)
                    );
                }
            }
            fail(key, detail, true);
            return;
        }
        Ok(_) => {}
    }
    let out = res.as_ref().copied().unwrap();
    // A call on an out-of-range CPU that cannot report it must change nothing.
    if call.cpu().is_some_and(|c| c >= n) {
        let post = snapshot(m, model);
        let bad = match out {
            Out::Pick(p) => p.is_some(),
            Out::Bool(b) => b,
            _ => false,
        };
        if bad || post != *pre {
            let detail = format!("returned {out:?}; {}", pre.diff(&post));
            fail(format!("{name}: out-of-range CPU changed state or returned work"), detail, true);
        }
        return;
    }
    let entity = |id: TaskId| entity_of(m, id);
    match (*call, out) {
        (Call::Create { params, .. }, Out::Id(id)) => {
            let allowed = params.affinity.and(&online);
            if model.issued(id) {
                fail("create: reissued an id".into(), format!("{id:?}"), true);
                return;
            }
            model.live.insert(id, Class::Active);
            let g = model.max_gen.entry(id.slot() as u32).or_insert(id.generation());
            *g = (*g).max(id.generation());
            let (state, cpu, e) = (m.state(id), m.task_cpu(id), entity(id));
            let good = matches!((state, cpu, e), (Ok(TaskState::Runnable), Ok(c), Ok(e))
                if allowed.contains(c) && e.affinity == allowed && e.nice.get() == params.nice
                    && e.policy == params.policy && e.on_rq);
            if !good {
                let detail = format!("{id:?}: state {state:?} cpu {cpu:?} entity {e:?}");
                fail("create: new task not runnable inside its affinity".into(), detail, true);
            }
        }
        (Call::Block { cpu, id }, _) => {
            model.live.insert(id, Class::Blocked);
            if m.current(cpu) != Some(id) {
                fail("block: task no longer current".into(), format!("{id:?} on {cpu}"), true);
            }
        }
        (Call::Wake { id, .. }, Out::Cpu(c)) => {
            model.live.insert(id, Class::Active);
            let in_place = pre.busy(id);
            let (cpu, e) = (m.task_cpu(id), entity(id));
            let good = match (cpu, e) {
                (Ok(at), Ok(e)) => at == c && c < n && (in_place || e.affinity.contains(c)),
                _ => false,
            };
            if !good {
                let detail = format!("{id:?} woken on {c}: task_cpu {cpu:?}, entity {e:?}");
                fail(format!("{name}: woken onto a wrong CPU"), detail, true);
            }
        }
        (Call::Exit { id }, _) => {
            if pre.busy(id) {
                model.live.insert(id, Class::Exiting);
            } else {
                model.exit(id);
            }
        }
        (Call::Exec { id, .. }, Out::Cpu(d)) => {
            let allowed = pre.task(id).map(|t| t.entity.affinity.and(&online)).unwrap_or_default();
            if !allowed.contains(d) {
                fail("exec: destination outside affinity".into(), format!("{id:?} -> {d}"), true);
            }
        }
        (Call::SetNice { id, nice }, _) => match entity(id) {
            Ok(e) if e.nice.get() == nice && e.load() == weight_for(e.policy, e.nice) => {}
            e => fail("set_nice: nice or weight not applied".into(), format!("{id:?} {nice}: {e:?}"), true),
        },
        (Call::SetAffinity { id, mask }, _) => {
            let allowed = mask.and(&online);
            let t = pre.task(id).unwrap();
            let queued = t.entity.on_rq && !pre.busy(id);
            let (cpu, e) = (m.task_cpu(id), entity(id));
            if e.as_ref().map(|e| e.affinity) != Ok(allowed) {
                fail("set_affinity: mask not applied".into(), format!("{id:?} {e:?}"), true);
            } else if queued && !cpu.is_ok_and(|c| allowed.contains(c)) {
                let full: Vec<usize> = (0..n).filter(|&c| !pre.cpus[c].has_room).collect();
                let detail = format!(
                    "{id:?} queued on CPU {} re-pinned to {allowed:?}: Ok but now on {cpu:?} (full before: {full:?})",
                    t.cpu
                );
                fail(format!("{SET_AFFINITY_LEFT_OUTSIDE} (an allowed CPU had room)"), detail, true);
            }
        }
        (Call::Schedule { cpu, .. }, Out::Pick(next)) => {
            if m.current(cpu) != next {
                let detail = format!("picked {next:?}, current {:?}", m.current(cpu));
                fail(format!("{name}: returned task is not current"), detail, true);
            }
            if let Some(t) = next {
                let e = entity(t);
                if !e.as_ref().is_ok_and(|e| e.affinity.contains(cpu)) {
                    let detail = format!("CPU {cpu} runs {t:?}, entity {e:?}");
                    fail(format!("{name}: runs a task outside its affinity"), detail, true);
                }
                if model.live.get(&t) != Some(&Class::Active) || m.state(t) != Ok(TaskState::Running) {
                    let detail = format!("{t:?}: model {:?}, state {:?}", model.live.get(&t), m.state(t));
                    fail(format!("{name}: picked a task that is not runnable"), detail, true);
                }
            }
        }
        _ => {}
    }
    // A task switched out of a CPU its affinity excludes must leave it (the invariant checker
    // finds it too; this says whether it had somewhere to go).
    if let Call::Schedule { cpu, .. } | Call::FinishSwitch { cpu } = *call {
        for (id, e) in stranded(m, cpu) {
            let room =
                (0..n).any(|c| e.affinity.contains(c) && m.with_cpu(c, |st| st.rq.has_room()) == Ok(true));
            let why = if room { "an allowed CPU has room" } else { "every allowed CPU is full" };
            let detail = format!("{id:?} stays queued on CPU {cpu}, affinity {:?}", e.affinity);
            fail(format!("{name}: switched-out task left queued outside its affinity ({why})"), detail, true);
        }
    }
    // An exiting task leaves when its CPU has finished switching away from it: the one being
    // switched out at the next schedule or finish_switch, the current one at schedule +
    // finish_switch.
    let leaving = match *call {
        Call::Schedule { cpu, finish: true } => vec![pre.cpus[cpu].switching_out, pre.cpus[cpu].curr],
        Call::Schedule { cpu, finish: false } | Call::FinishSwitch { cpu } => {
            vec![pre.cpus[cpu].switching_out]
        }
        _ => vec![],
    };
    for id in leaving.into_iter().flatten() {
        if model.live.get(&id) == Some(&Class::Exiting) {
            model.exit(id);
        }
    }
}

/// The call's name for failure kinds; a `schedule` while the previous switch on that CPU is
/// not finished says so.
fn label(call: &Call, pre: &Snapshot) -> String {
    match *call {
        Call::Schedule { cpu, .. } if pre.cpus.get(cpu).is_some_and(|c| c.switching_out.is_some()) => {
            format!("{} after an unfinished switch", call.name())
        }
        _ => call.name().to_string(),
    }
}

/// Tasks queued (not running) on `cpu` that their affinity excludes.
fn stranded<const T: usize>(m: &M<T>, cpu: usize) -> Vec<(TaskId, Entity)> {
    m.with_cpu_entities(cpu, |_, ents| {
        ents.filter(|(_, e)| e.on_rq && !e.on_cpu && !e.affinity.contains(cpu)).collect()
    })
    .unwrap_or_default()
}

/// The model and the machine agree on every live task and on `exited` (all exited ids, or
/// the newest few and a rotating sample).
fn check_model<const T: usize>(m: &M<T>, model: &Model, exited: &[TaskId]) -> Result<(), String> {
    if m.nr_tasks() != model.live.len() {
        return Err(format!("nr_tasks {} but the model has {} live", m.nr_tasks(), model.live.len()));
    }
    for (&id, &class) in &model.live {
        let s = m.state(id);
        let good = matches!(
            (class, s),
            (Class::Active, Ok(TaskState::Runnable | TaskState::Running))
                | (Class::Blocked, Ok(TaskState::Blocked))
                | (Class::Exiting, Ok(TaskState::Exiting))
        );
        if !good {
            return Err(format!("{id:?}: model {class:?}, state {s:?}"));
        }
    }
    for &id in exited {
        if m.state(id) != Err(SchedError::StaleTask(id)) {
            return Err(format!("exited {id:?}: state {:?}", m.state(id)));
        }
    }
    for c in 0..m.nr_cpus() {
        let unknown = m.with_cpu(c, |st| st.rq.attached().find(|(_, id)| !model.live.contains_key(id)));
        if let Ok(Some((_, id))) = unknown {
            return Err(format!("CPU {c} holds {id:?}, which the model does not know as live"));
        }
    }
    Ok(())
}

/// The newest exited ids and a few more, rotating with `i`.
fn exited_sample(model: &Model, i: usize) -> Vec<TaskId> {
    let e = &model.exited;
    let mut v: Vec<TaskId> = e.iter().rev().take(4).copied().collect();
    if !e.is_empty() {
        v.extend((0..4).map(|k| e[(i * 4 + k) % e.len()]));
    }
    v
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".into())
}

/// What a case is made of: generated operations, resolved against the state as they come, or
/// concrete calls (a shrunk reproducer), each with the time that passes before it.
trait Input: Copy {
    fn resolve(self, model: &Model, pre: &Snapshot, n: usize) -> (Call, u64);
}

impl Input for Op {
    fn resolve(self, model: &Model, pre: &Snapshot, n: usize) -> (Call, u64) {
        resolve(self, model, pre, n)
    }
}

impl Input for (Call, u64) {
    fn resolve(self, _: &Model, _: &Snapshot, _: usize) -> (Call, u64) {
        self
    }
}

/// The calls a case made, as lines to read and as concrete calls to replay.
#[derive(Default)]
struct Trace {
    lines: Vec<String>,
    calls: Vec<(Call, u64)>,
    /// Whether each call was refused (so changed nothing).
    refused: Vec<bool>,
}

/// Runs one sequence of operations on a fresh machine. Returns the failures (the case stops
/// at the first hard one, or at the first failure of kind `stop_at`) with the index of the
/// operation that failed. `trace` collects a readable log of the calls.
fn run_case<const T: usize, I: Input>(
    topo: &Topo,
    ops: &[I],
    stats: &mut Stats,
    stop_at: Option<&str>,
    mut trace: Option<&mut Trace>,
) -> Vec<(usize, Failure)> {
    let mut fails: Vec<(usize, Failure)> = Vec::new();
    let mut last_call = String::from("set-up");
    let mut index = 0usize;
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let m: Box<M<T>> = Box::new(Smp::new(Counting::default(), Features::default(), 250));
        m.init_with(topo.build).expect("topology");
        let n = m.nr_cpus();
        let mut model = Model { tasks: T, ..Model::default() };
        let mut now = 1_000_000u64;
        stats.cases += 1;
        for (i, &op) in ops.iter().enumerate() {
            index = i;
            let pre = snapshot(&m, &model);
            let (call, dt) = op.resolve(&model, &pre, n);
            now += dt;
            last_call = call.name().to_string();
            stats.calls += 1;
            if pre.cpus.iter().any(|c| !c.has_room) {
                stats.full_rq += 1;
            }
            stats.max_live = stats.max_live.max(pre.nr_tasks);
            if pre.nr_tasks >= T {
                stats.full_table += 1;
            }
            watch_progress(|| format!("[{}] case {} op #{i}: {call:?}", topo.name, stats.cases));
            let res = execute(&m, now, call);
            // A task left in transit would make later calls on it wait forever.
            let created = match res {
                Ok(Out::Id(id)) => Some(id),
                _ => None,
            };
            if let Some(id) =
                model.live.keys().copied().chain(created).find(|&id| m.state(id) == Ok(TaskState::Waking))
            {
                let f = Failure {
                    key: format!("{}: task left in transit", label(&call, &pre)),
                    detail: format!("{id:?}"),
                    hard: true,
                };
                fails.push((i, f));
                return;
            }
            if let Err(e) = &res {
                *stats.refusals.entry(err_kind(e)).or_default() += 1;
            }
            if let Some(t) = trace.as_deref_mut() {
                t.lines.push(format!("#{i:<3} t={now:<10} {call:?} -> {res:?}"));
                t.calls.push((call, dt));
                t.refused.push(res.is_err());
            }
            let mut f = Vec::new();
            check_call(&m, n, &call, &res, &pre, &mut model, &mut f);
            if !f.iter().any(|f| f.hard) {
                if let Err(v) = m.check_invariants() {
                    let key = format!("{}: invariant: {}", label(&call, &pre), v.what);
                    f.push(Failure { key, detail: format!("{v:?}"), hard: true });
                } else if let Err(d) = check_model(&m, &model, &exited_sample(&model, i)) {
                    f.push(Failure {
                        key: format!("{}: model disagrees", label(&call, &pre)),
                        detail: d,
                        hard: true,
                    });
                }
            }
            let stop = f.iter().any(|f| f.hard || Some(f.key.as_str()) == stop_at);
            fails.extend(f.into_iter().map(|f| (i, f)));
            if stop {
                return;
            }
        }
        // Every id that ever exited is still stale.
        if let Err(d) = check_model(&m, &model, &model.exited) {
            let f = Failure { key: "end of case: model disagrees".into(), detail: d, hard: true };
            fails.push((ops.len().saturating_sub(1), f));
        }
    }));
    if let Err(p) = outcome {
        let key = format!("panic in {last_call}");
        fails.push((index, Failure { key, detail: panic_message(&*p), hard: true }));
    }
    for (_, f) in &fails {
        *stats.failures.entry(f.key.clone()).or_default() += 1;
    }
    fails
}

/// Shrinks `ops` to a short sequence that still fails with `key` (delta debugging over the
/// operations), until `deadline`.
fn shrink<const T: usize, I: Input>(topo: &Topo, ops: &[I], key: &str, deadline: Instant) -> Vec<I> {
    let fails_at = |ops: &[I]| -> Option<usize> {
        let mut scratch = Stats::default();
        run_case::<T, I>(topo, ops, &mut scratch, Some(key), None)
            .into_iter()
            .find(|(_, f)| f.key == key)
            .map(|(i, _)| i)
    };
    let mut cur = ops.to_vec();
    match fails_at(&cur) {
        Some(i) => cur.truncate(i + 1),
        None => return cur,
    }
    let mut chunk = cur.len().div_ceil(2);
    while chunk >= 1 && Instant::now() < deadline {
        let mut i = 0;
        let mut progress = false;
        while i < cur.len() && Instant::now() < deadline {
            let end = (i + chunk).min(cur.len());
            let cand: Vec<I> = cur[..i].iter().chain(&cur[end..]).copied().collect();
            match fails_at(&cand) {
                Some(j) => {
                    cur = cand;
                    cur.truncate(j + 1);
                    progress = true;
                }
                None => i += chunk,
            }
        }
        if !progress {
            chunk /= 2;
        }
    }
    cur
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().replace('_', "").parse().ok())
}

/// Progress of the topology test on this thread, for its watchdog.
struct Watch {
    calls: AtomicU64,
    last: Mutex<String>,
    done: AtomicBool,
}

thread_local! {
    static WATCH: RefCell<Option<Arc<Watch>>> = const { RefCell::new(None) };
}

/// Notes a call about to be made (described by `what`) for the watchdog.
fn watch_progress(what: impl FnOnce() -> String) {
    WATCH.with(|w| {
        if let Some(w) = &*w.borrow() {
            w.calls.fetch_add(1, Relaxed);
            *w.last.lock().unwrap() = what();
        }
    });
}

/// Starts a watchdog for this thread's test: a call that never returns (a core spinning on a
/// state it will not leave) aborts the run with the call, instead of hanging CI.
fn start_watchdog(name: &'static str) -> Arc<Watch> {
    let w = Arc::new(Watch {
        calls: AtomicU64::new(0),
        last: Mutex::new(String::new()),
        done: AtomicBool::new(false),
    });
    WATCH.with(|t| *t.borrow_mut() = Some(w.clone()));
    let dog = w.clone();
    std::thread::spawn(move || {
        let (mut seen, mut since) = (u64::MAX, Instant::now());
        while !dog.done.load(Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
            let now = dog.calls.load(Relaxed);
            if now != seen {
                (seen, since) = (now, Instant::now());
            } else if since.elapsed() > Duration::from_secs(120) {
                eprintln!(
                    "prop_hostile[{name}]: a call has not returned for 120 s: {}",
                    dog.last.lock().unwrap()
                );
                std::process::abort();
            }
        }
    });
    w
}

/// Stops the watchdog when the test ends, however it ends.
struct StopWatch(Arc<Watch>);

impl Drop for StopWatch {
    fn drop(&mut self) {
        self.0.done.store(true, Relaxed);
    }
}

static TOTAL_CALLS: AtomicU64 = AtomicU64::new(0);
static TOTAL_FAILURES: AtomicU64 = AtomicU64::new(0);
static TESTS_DONE: AtomicUsize = AtomicUsize::new(0);

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
