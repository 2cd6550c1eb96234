//! The machine model: N CPUs in virtual time (ns) driving `sched_core::Smp` exactly as a
//! kernel does — a tick per CPU at HZ with its own phase, reschedule IPIs with a latency,
//! `schedule` + `finish_switch` around every switch — while tasks execute behaviours.
//!
//! Time only advances between events; within one event every core call sees the same `now`.
//! A CPU that runs a task makes progress on that task's current step; a switch costs
//! `switch_cost_ns` before the next task makes progress, and a task that lands on another
//! CPU than it last ran on first pays `migration_cost_ns` of cache refill.
//!
//! This file is the model: the event loop and what each event does. Its configuration is
//! `config.rs`, the tasks' behaviours and records `workload.rs`, the simulated CPUs and the
//! platform the core calls `platform.rs`, and what a run measured `report.rs`.

mod config;
mod groups;
mod platform;
mod program;
mod report;
mod workload;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use sched_core::{InitError, SchedError, Smp, TaskId, Tunables};

pub use config::{Config, TopologyKind, DEFAULT_CREATE_NS, DEFAULT_SETUP_NS};
use platform::CpuSim;
pub use platform::SimPlatform;
pub use program::{check_program, program_room, ProgramRefusal, MAX_ACTIVATIONS, PROGRAM_THREADS};
pub use report::RunReport;
pub use workload::{Behavior, EventPool};
use workload::{TaskMap, TaskSim};

pub use crate::arch::OneThread;
use crate::rng::Rng;
use crate::trace::TraceLog;

/// Task-table size of the simulated machine.
pub const SIM_TASKS: usize = 4200;
/// Runnable tasks per CPU.
pub const SIM_Q: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Tick(usize),
    Ipi(usize),
    Done { cpu: usize, gen: u32 },
    Wake(TaskId),
}

/// Completion times from here on are never reached (a spinner's endless work).
const NEVER_NS: u64 = u64::MAX / 8;

/// The simulated machine.
pub struct Machine<const C: usize, const G: usize = 0> {
    /// The scheduler under test.
    pub smp: Box<Smp<SimPlatform, C, SIM_TASKS, SIM_Q, OneThread, G>>,
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
    /// The workload program being run, if any.
    program: Option<Box<program::ProgramRun>>,
    /// A workload program deadlocked ([`Machine::program_deadlock`]): nothing it does can
    /// happen any more, so the event loop stops there instead of running idle to its bound.
    halted: bool,
    /// The name of the task whose exit the next switch completes (tracing only): its record
    /// is gone by then, and its last `sched_switch` must still name it.
    exiting: Option<(TaskId, String)>,
    /// Whether each event prefetches what the next ticks read: large machines (above
    /// [`LARGE_ABOVE_CPUS`]) on a host with a prefetch instruction, where the core names
    /// the lines (64-bit targets).
    prefetch: bool,
}

/// Machines with more CPUs are large: their scheduler state outgrows a host core's caches
/// and TLB, so each event prefetches the next ticks' lines and the state asks for huge
/// pages. A smaller machine's state stays in a core's L2 cache, where prefetching bought
/// nothing and its bookkeeping cost time (docs/simulator.md).
pub const LARGE_ABOVE_CPUS: usize = 256;

impl<const C: usize, const G: usize> Machine<C, G> {
    /// Builds a machine (call on a thread with a large stack for big `C`).
    pub fn new(cfg: Config) -> Result<Machine<C, G>, InitError> {
        let smp: Box<Smp<SimPlatform, C, SIM_TASKS, SIM_Q, OneThread, G>> =
            Box::new(Smp::new(SimPlatform::default(), cfg.features, cfg.hz));
        let large = cfg.cpus > LARGE_ABOVE_CPUS;
        let prefetch = large && crate::arch::HAS_PREFETCH && cfg!(target_pointer_width = "64");
        if large {
            crate::arch::use_huge_pages(&*smp);
        }
        #[cfg(target_pointer_width = "64")]
        smp.set_prefetch_hints(prefetch);
        smp.init_with(|t| cfg.topology.build(t, cfg.cpus))?;
        if cfg.trace {
            *smp.platform().failures.borrow_mut() = Some(Vec::new());
        }
        let mut t = Tunables::for_cpus(cfg.cpus);
        t.runnable_init = cfg.runnable_init;
        smp.set_tunables(t).expect("the default tunables are in range");
        let mut rng = Rng::new(cfg.seed);
        // The core's rate (0 in the configuration is its default), so that both tick alike.
        let tick_ns = 1_000_000_000 / u64::from(smp.hz());
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
            program: None,
            halted: false,
            exiting: None,
            prefetch,
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
                // (The seq is the largest yet, so only the time decides against the back.)
                if self.tick_queue.back().is_none_or(|b| b.0 <= at) {
                    self.tick_queue.push_back((at, self.seq, cpu));
                } else {
                    let e = (at, self.seq, cpu);
                    let i = self.tick_queue.partition_point(|x| *x <= e);
                    self.tick_queue.insert(i, e);
                }
            }
            _ => self.queue.push(Reverse((at, self.seq, ev))),
        }
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

    /// Makes `cpu` act on a pending reschedule request (after setting work up from
    /// outside the event loop). A CPU out of range is [`SchedError::CpuOutOfRange`].
    pub fn start(&mut self, cpu: usize) -> Result<(), SchedError> {
        if cpu >= self.cpus.len() {
            return Err(SchedError::CpuOutOfRange(cpu));
        }
        if self.smp.need_resched(cpu) || self.cpus[cpu].running.is_none() {
            self.reschedule(cpu);
        }
        Ok(())
    }

    /// Runs until no task is left, `until` (ns) is reached or a workload program deadlocks
    /// (then [`Machine::now`] is the deadlock's time, and the machine stays halted there:
    /// later calls return at once). Returns whether tasks remain.
    pub fn run_until(&mut self, until: u64) -> bool {
        // One loop per choice, so that a small machine's loop carries no prefetching test.
        if self.prefetch {
            self.run_events::<true>(until)
        } else {
            self.run_events::<false>(until)
        }
    }

    /// A CPU that runs nothing while the core has work queued there, with no reschedule asked
    /// or on its way: nothing would ever tell it (a lost wakeup). Checked after every event
    /// with [`Config::check_every_event`].
    fn idle_with_work(&self) -> Option<usize> {
        (0..self.cpus.len()).find(|&c| {
            let sim = &self.cpus[c];
            sim.running.is_none()
                && !sim.ipi_pending
                && self
                    .smp
                    .with_cpu(c, |st| {
                        st.rq.nr_running() > 0 && st.rq.curr_id().is_none() && !st.rq.need_resched()
                    })
                    .unwrap_or(false)
        })
    }

    /// A CPU whose tick is stopped while the core does not count it in tickless idle: the
    /// busy CPUs' kicks, which balance for the tickless, would pass it by. Checked after every
    /// event with [`Config::check_every_event`].
    fn stopped_not_tickless(&self) -> Option<usize> {
        (0..self.cpus.len()).find(|&c| !self.cpus[c].ticking && !self.smp.nohz().is_tickless(c))
    }

    /// [`Machine::run_until`]'s event loop; with `PREFETCH`, each event first prefetches
    /// what the next ticks read ([`Machine::prefetch_ticks`]).
    fn run_events<const PREFETCH: bool>(&mut self, until: u64) -> bool {
        if self.halted {
            return !self.tasks.is_empty();
        }
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
                // (Never back: a bound already passed leaves the clock where it is.)
                self.now = self.now.max(until);
                return true;
            }
            let ev = if from_ticks {
                self.tick_queue.pop_front().map(|(_, _, cpu)| Ev::Tick(cpu))
            } else {
                self.queue.pop().map(|Reverse((_, _, ev))| ev)
            };
            let Some(ev) = ev else { break };
            self.now = at;
            if PREFETCH {
                self.prefetch_ticks();
            }
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
                if let Some(cpu) = self.idle_with_work() {
                    panic!(
                        "CPU {cpu} idles with work queued and no reschedule coming, at {} ns after {:?}",
                        self.now, ev
                    );
                }
                if let Some(cpu) = self.stopped_not_tickless() {
                    panic!(
                        "CPU {cpu}'s tick stopped while the core does not count it tickless (no kick \
                         would reach it), at {} ns after {:?}",
                        self.now, ev
                    );
                }
            }
            if self.tasks.is_empty() {
                return false;
            }
            if self.halted {
                return true;
            }
        }
        // Nothing left to happen before `until`.
        self.now = self.now.max(until);
        !self.tasks.is_empty()
    }

    /// Prefetches what the queued ticks will read, in a two-step pipeline so that every
    /// line arrives while an event runs: for the tick after next, its CPU's lines
    /// ([`Smp::cpu_lines`]) and the simulator's record of it; for the next tick, the lines of
    /// the task running there and of the leftmost queued one, usually the next pick
    /// ([`Smp::task_lines`], whose hint lies in a line the previous step fetched), and the
    /// simulator's records of both.
    /// A hint: results do not depend on it. (The core names these lines on 64-bit targets.)
    fn prefetch_ticks(&self) {
        #[cfg(target_pointer_width = "64")]
        if let Some(&(_, _, cpu)) = self.tick_queue.get(1) {
            self.smp.cpu_lines(cpu, crate::arch::prefetch);
            crate::arch::prefetch(&self.cpus[cpu] as *const CpuSim as *const u8);
        }
        #[cfg(target_pointer_width = "64")]
        if let Some(&(_, _, cpu)) = self.tick_queue.front() {
            let curr = self.cpus[cpu].running;
            let first = self.smp.task_lines(cpu, curr, crate::arch::prefetch);
            for slot in curr.map(TaskId::slot).into_iter().chain(first) {
                if let Some(record) = self.tasks.entry_addr(slot) {
                    crate::arch::prefetch(record);
                }
            }
        }
    }

    // Inlined into both event loops: a call here would be paid on every tick.
    #[inline(always)]
    fn on_tick(&mut self, cpu: usize) {
        self.ticks += 1;
        // Idle as the core sees it too: a task queued here, its IPI on the way, keeps the
        // tick (the core would not count the CPU tickless, and no kick would reach it).
        let idle = self.cpus[cpu].running.is_none()
            && self.smp.stats(cpu).idle.load(std::sync::atomic::Ordering::Relaxed);
        // An idle CPU keeps its tick while a group's period timer runs (the tick runs it).
        if idle && self.cfg.nohz && (G == 0 || self.smp.bandwidth_timer().is_none()) {
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
        c.gen = c.gen.wrapping_add(1);
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
        if reqs.is_empty() {
            return;
        }
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
            // Rebuilt from its raw word (the same id): the returned id is then read in the
            // pieces the call stored, not copied as one block those stores cannot forward to.
            let picked = self.smp.schedule(cpu, self.now).expect("a simulated CPU");
            next = picked.map(|t| TaskId::from_raw(t.to_raw()));
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
                    if let Some(until) = ts.until {
                        // Wall time: what is left of it, whatever the task did not run.
                        ts.remaining = until.saturating_sub(runs_at);
                    } else if ts.last_cpu.is_some_and(|l| l != cpu) {
                        // Cache refill: more work for the step under way, or, for a program
                        // thread between two steps, for its next one (it starts at once).
                        if ts.remaining == 0 && matches!(ts.behavior, Behavior::Program { .. }) {
                            ts.refill = self.cfg.migration_cost_ns;
                        } else {
                            ts.remaining = ts.remaining.saturating_add(self.cfg.migration_cost_ns);
                        }
                    }
                    ts.last_cpu = Some(cpu);
                    if let Some(woke) = ts.woke_at.take() {
                        self.wake_latencies.push((ts.tag, runs_at - woke));
                    }
                }
            }
            if let Some(tr) = self.trace.as_mut() {
                let exiting = self.exiting.take();
                let name = |t: Option<TaskId>| {
                    let t = t?;
                    match (self.tasks.get(&t), &exiting) {
                        (Some(s), _) => Some(s.name.clone()),
                        (None, Some((gone, n))) if *gone == t => Some(n.clone()),
                        (None, _) => None,
                    }
                };
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

    /// The running task finished its current step.
    fn on_done(&mut self, cpu: usize) {
        self.account(cpu);
        let Some(t) = self.cpus[cpu].running else { return };
        // Only the Copy fields: no clone of the name on every event.
        let Some(&TaskSim { behavior, remaining, step, .. }) = self.tasks.get(&t) else { return };
        if remaining > 0 {
            self.arm_done(cpu);
            return;
        }
        match behavior {
            Behavior::Spinner => {
                if let Some(s) = self.tasks.get_mut(&t) {
                    s.remaining = u64::MAX / 4;
                }
                self.arm_done(cpu);
            }
            Behavior::Program { thread } => self.program_step(cpu, t, thread),
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
        self.finish_task_waking(cpu, t, &[]);
    }

    /// `t`, running on `cpu`, exits; then the tasks its end lets go on (`wakes`) are woken
    /// from `cpu`, before it picks its next task.
    fn finish_task_waking(&mut self, cpu: usize, t: TaskId, wakes: &[TaskId]) {
        let ts = self.tasks.remove(&t);
        self.smp.exit(self.now, t).expect("a live task exits");
        self.after_core_call(cpu);
        if let Some(ts) = ts {
            if ts.is_worker {
                self.last_worker_exit = Some(self.now);
            }
            if self.trace.is_some() {
                self.exiting = Some((t, ts.name));
            }
        }
        for &w in wakes {
            self.wake_traced(cpu, w, "a program thread waits");
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
}
