//! A workload program (an rt-app file lowered by sched-workload) on the simulated machine:
//! each of its threads is a task whose steps the program's [`World`] gives; what the run
//! measured is rt-app's figures per task ([`sched_workload::figures`]).

use sched_core::{CpuMask, SchedError, TaskId};
use sched_workload::figures::{per_task, TaskFigures};
use sched_workload::interp::{Activation, Host, Step, ThreadId, World};
use sched_workload::Program;

use super::workload::Behavior;
use super::{Ev, Machine};

/// Threads (started and forked) one simulated run of a program may have.
pub const PROGRAM_THREADS: usize = 2048;

/// The threads a run of a program may have on a machine of `cpus` CPUs: at most
/// [`PROGRAM_THREADS`], and as many as the CPUs' runqueues hold: [`super::SIM_Q`] each, less
/// one each on two CPUs or more (see [`check_program`]).
pub fn program_room(cpus: usize) -> usize {
    room(cpus, super::SIM_Q)
}

/// The threads a run may have on `cpus` CPUs whose runqueues hold `slots` tasks each.
fn room(cpus: usize, slots: usize) -> usize {
    PROGRAM_THREADS.min(held(cpus.max(1), slots))
}

/// The threads `width` CPUs of `slots` runqueue slots each can be counted on to hold. A
/// thread on its way from one CPU to another (a push: its CPU's current task, moved for
/// its affinity or by active balancing) holds a slot at each end meanwhile, and each CPU
/// pushes at most one at a time: among two CPUs or more, a slot of each is kept for that.
fn held(width: usize, slots: usize) -> usize {
    if width > 1 {
        width * slots.saturating_sub(1)
    } else {
        width * slots
    }
}

/// Why a program cannot run on a machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgramRefusal {
    /// More threads than the machine holds, overall or on the CPUs some masks allow.
    TooLarge(String),
    /// A CPU mask that names a CPU the machine lacks.
    NoCpu(String),
}

impl ProgramRefusal {
    /// The exit code of rt-app's error of the same kind (`RtAppError::exit_code`): 13 too
    /// large, 14 cannot run.
    pub fn exit_code(&self) -> u8 {
        match self {
            ProgramRefusal::TooLarge(_) => 13,
            ProgramRefusal::NoCpu(_) => 14,
        }
    }
}

impl std::fmt::Display for ProgramRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProgramRefusal::TooLarge(why) | ProgramRefusal::NoCpu(why) => f.write_str(why),
        }
    }
}

/// Whether `prog` can run on an empty machine of `cpus` CPUs whose runqueues hold `slots`
/// tasks each ([`super::SIM_Q`] without task groups, less a slot per group with them), or why
/// not:
/// - its threads, forks included, are at most [`PROGRAM_THREADS`] and what the machine's
///   CPUs hold: `slots` each, less one each on two CPUs or more, kept for a thread on its way
///   between two of them (a push holds a slot at each end);
/// - every CPU mask of a task or a phase names one of the machine's CPUs;
/// - for each such mask, the threads that may run on its CPUs (those of every task any of
///   whose masks shares a CPU with it, confined or not) are at most what its CPUs hold (as
///   above), so that a thread confined to it finds a runqueue slot wherever placement and
///   balancing have put the others, and however the phases move them. A task forked without
///   bound counts as many threads as the machine holds, and no mask's CPUs see more than
///   that: a fork that would pass what the machine holds starts no thread, so that every
///   thread, asleep or not, has a runqueue slot to wake into.
pub fn check_program(prog: &Program<'_>, cpus: usize, slots: usize) -> Result<(), ProgramRefusal> {
    let room = room(cpus, slots);
    let threads = prog.thread_bound();
    if threads > room as u64 {
        return Err(ProgramRefusal::TooLarge(format!(
            "{threads} threads, the simulator runs at most {room} on {cpus} CPUs ({} per CPU, {PROGRAM_THREADS} in all)",
            held(cpus.max(1), slots) / cpus.max(1)
        )));
    }
    // A mask is a bit per CPU of the first 64; `None` is every CPU, of any machine.
    let machine = if cpus >= 64 { u64::MAX } else { (1u64 << cpus) - 1 };
    let width = |m: Option<u64>| m.map_or(cpus, |m| (m & machine).count_ones() as usize);
    // (Both name CPUs of the machine only: `mask_past_cpus` is refused first.)
    let meets = |a: Option<u64>, m: Option<u64>| match (a, m) {
        (Some(a), Some(m)) => a & m & machine != 0,
        _ => true,
    };
    // Per task: its threads and every mask it may have.
    let totals = prog.thread_totals();
    let tasks: Vec<(u64, Vec<Option<u64>>)> = prog
        .tasks()
        .enumerate()
        .map(|(i, t)| {
            let masks =
                core::iter::once(t.cpus()).chain(t.phases().filter_map(|p| p.cpus().map(Some))).collect();
            (totals[i].unwrap_or(room as u64), masks)
        })
        .collect();
    if let Some((t, m, cpu)) = prog.mask_past_cpus(cpus) {
        return Err(ProgramRefusal::NoCpu(format!(
            "task {}: its CPU mask {m:#x} names CPU {cpu}, past the machine's {cpus} CPUs (rt-app refuses it too)",
            t.name()
        )));
    }
    for (t, (_, masks)) in prog.tasks().zip(&tasks) {
        for &m in masks {
            let there: u64 =
                tasks.iter().filter(|(_, ms)| ms.iter().any(|&a| meets(a, m))).map(|(n, _)| n).sum();
            let held = held(width(m), slots) as u64;
            // (However many threads the tasks could have, the machine holds `room` at once:
            // a fork past it starts none.)
            let there = there.min(room as u64);
            if there > held {
                return Err(ProgramRefusal::TooLarge(format!(
                    "task {}: {there} threads may run on the CPUs of its mask {}, which hold {held}",
                    t.name(),
                    m.map_or("(every CPU)".to_string(), |m| format!("{m:#x}"))
                )));
            }
        }
    }
    Ok(())
}

/// The activations one run of a program records (about 80 bytes each): a run that reaches
/// it is cut there, as at the bound of simulated time, rather than grow without limit
/// ([`super::Config::max_activations`]).
pub const MAX_ACTIVATIONS: usize = 2 << 20;

/// A program's run on the machine.
pub(super) struct ProgramRun {
    prog: Program<'static>,
    world: Box<World<PROGRAM_THREADS>>,
    /// Per thread: its task in the core, whether its start delay has passed, the CPU mask
    /// last applied.
    threads: Vec<(TaskId, bool, Option<u64>)>,
    /// A fork was refused (warned once).
    fork_refused: bool,
    /// The threads the machine holds ([`check_program`]'s room): a fork past it, which a
    /// sleeper's wakeup might then find no runqueue slot for, starts no thread.
    room: usize,
    /// When every live thread came to wait for another (`World::stuck`), in a program without
    /// a `duration`: nothing happens after, and the run's figures end there.
    deadlocked_at: Option<u64>,
    /// When the run reached [`MAX_ACTIVATIONS`]: it is cut there, its figures end there.
    cut_at: Option<u64>,
    acts: Vec<Activation>,
    /// CPU time of the exited threads, per task definition (ns).
    cpu_ns: Vec<u64>,
    /// Per task definition: whether its threads take events from a pool (the run's workers,
    /// whose spread is measured).
    takers: Vec<bool>,
    /// Where each pool's events start in the machine's event records.
    pool_at: Vec<u64>,
    t0: u64,
}

impl ProgramRun {
    /// Whether program thread `th` takes events from a pool (a worker).
    pub(super) fn takes(&self, th: ThreadId) -> bool {
        self.world.task_of(th).is_some_and(|task| self.takers.get(task as usize) == Some(&true))
    }
}

/// What a step asked of the machine besides its answer.
#[derive(Default)]
struct Collect {
    wakes: Vec<ThreadId>,
    acts: Vec<Activation>,
    /// The pool event taken (pool, number), if any.
    taken: Option<(u16, u32)>,
}

impl Host for Collect {
    fn wake(&mut self, t: ThreadId) {
        self.wakes.push(t);
    }

    fn activation(&mut self, a: &Activation) {
        self.acts.push(*a);
    }

    fn taken(&mut self, _: ThreadId, pool: u16, event: u32) {
        self.taken = Some((pool, event));
    }
}

/// The core's mask of a program's (a bit per CPU of the first 64; `None`: every CPU).
fn mask(bits: Option<u64>) -> CpuMask {
    match bits {
        None => CpuMask::ALL,
        Some(bits) => (0..64).filter(|c| bits >> c & 1 != 0).collect(),
    }
}

impl<const C: usize, const G: usize> Machine<C, G> {
    /// Starts `prog` now: every task's instances are created from CPU 0, each beginning after
    /// its task's delay. Refused (with why) if the machine, empty, could not hold it
    /// ([`check_program`]; with forks without bound, a fork past the table starts no thread),
    /// or if tasks of its own already live.
    pub fn start_program(&mut self, prog: Program<'static>) -> Result<(), String> {
        if !self.tasks.is_empty() {
            return Err(format!(
                "{} tasks already live: a program starts on an empty machine",
                self.tasks.len
            ));
        }
        let slots = super::SIM_Q.saturating_sub(G);
        check_program(&prog, self.cpus.len(), slots).map_err(|e| e.to_string())?;
        let t0 = self.now.max(1);
        let mut world = Box::new(World::new(t0));
        world.spawn_all(&prog).map_err(|_| format!("more than {PROGRAM_THREADS} threads"))?;
        let n = world.len();
        let tasks = prog.tasks().count();
        let takers: Vec<bool> = prog.tasks().map(|t| t.takes()).collect();
        // The workers the run will have, for the spread.
        self.worker_target = prog.workers();
        let mut pool_at = Vec::new();
        let mut events = 0u64;
        for (size, _) in prog.pools() {
            pool_at.push(events);
            events += u64::from(size);
        }
        if events > 0 {
            self.record_events(events);
        }
        self.program = Some(Box::new(ProgramRun {
            prog,
            world,
            threads: Vec::new(),
            fork_refused: false,
            room: room(self.cpus.len(), slots),
            deadlocked_at: None,
            cut_at: None,
            acts: Vec::new(),
            cpu_ns: vec![0; tasks],
            takers,
            pool_at,
            t0,
        }));
        for th in 0..n {
            // (`check_program` admitted the program on this machine: its threads have room.)
            self.spawn_thread(0, th as ThreadId).expect("a program the machine was checked to hold");
        }
        Ok(())
    }

    /// Creates the core's task for program thread `th`, from `cpu`; the core's refusal if it
    /// has no room for it (then the thread keeps its place in the world, as started and
    /// with no task).
    fn spawn_thread(&mut self, cpu: usize, th: ThreadId) -> Result<(), SchedError> {
        let Some(run) = self.program.as_ref() else { return Ok(()) };
        let Some(def) = run.world.task_of(th).and_then(|t| run.prog.task(t as usize)) else { return Ok(()) };
        let (name, cpus, nice) = (format!("{}-{th}", def.name()), def.cpus(), def.nice());
        let id = match self.spawn_inner(cpu, Behavior::Program { thread: th }, &name, mask(cpus)) {
            Ok(id) => id,
            Err(e) => {
                if let Some(run) = self.program.as_mut() {
                    run.threads.push((TaskId::NONE, true, cpus));
                }
                return Err(e);
            }
        };
        if nice != 0 {
            self.smp.set_nice(self.now, id, nice).expect("a nice value the program checked");
        }
        if def.slice_us() != 0 {
            let ns = u64::from(def.slice_us()) * 1000;
            self.smp.set_slice(self.now, id, ns).expect("a slice the program checked");
        }
        if let Some(run) = self.program.as_mut() {
            run.threads.push((id, false, cpus));
        }
        Ok(())
    }

    /// Program thread `th` (task `t`, running on `cpu`) finished its step: the next ones,
    /// until one takes time, blocks or ends the thread.
    pub(super) fn program_step(&mut self, cpu: usize, t: TaskId, th: ThreadId) {
        // A pool event it was doing is done.
        if let Some((ev, start)) = self.tasks.get_mut(&t).and_then(|s| s.event.take()) {
            self.pool.latency[ev as usize] = self.now - start;
            self.pool.done[ev as usize] += 1;
        }
        loop {
            let now = self.now;
            let Some(run) = self.program.as_mut() else { return };
            let Some(&(_, started, applied)) = run.threads.get(th as usize) else { return };
            if !started {
                run.threads[th as usize].1 = true;
                let start = run.world.start_of(th);
                if start > now {
                    return self.sleep_until(cpu, t, start);
                }
            }
            run.world.running(th, now);
            let mut host = Collect::default();
            let step = run.world.step(&run.prog, th, now, &mut host);
            run.acts.extend(host.acts.iter().map(|a| Activation { cpu: cpu as u16, ..*a }));
            if run.acts.len() >= self.cfg.max_activations && run.cut_at.is_none() {
                run.cut_at = Some(now);
                self.halted = true;
            }
            let want = run.world.cpus_of(&run.prog, th);
            let woken: Vec<TaskId> =
                host.wakes.iter().filter_map(|&w| run.threads.get(w as usize)).map(|w| w.0).collect();
            if want != applied {
                run.threads[th as usize].2 = want;
            }
            if let Some((pool, n)) = host.taken {
                let ev = run.pool_at.get(pool as usize).map_or(0, |at| at + u64::from(n));
                if let Some(s) = self.tasks.get_mut(&t) {
                    s.event = Some((ev, now));
                }
            }
            if step == Step::Exit {
                // Those its end wakes (a parent joining it) are woken once it is gone.
                self.account(cpu);
                let ran = self.tasks.get(&t).map_or(0, |s| s.ran_ns);
                if let Some(run) = self.program.as_mut() {
                    if let Some(task) = run.world.task_of(th) {
                        run.cpu_ns[task as usize] += ran;
                    }
                }
                self.note_deadlock(now);
                return self.finish_task_waking(cpu, t, &woken);
            }
            for w in woken {
                self.wake_traced(cpu, w, "a program thread waits");
            }
            if want != applied && step != Step::Exit {
                self.smp.set_affinity(now, t, mask(want)).expect("a mask the program checked");
                self.after_core_call(cpu);
            }
            // A migration's cache refill lengthens the next work step (a wall-time step holds
            // it within its time; one that waits first has left it behind: `set_step`).
            let refill = self.tasks.get(&t).map_or(0, |s| s.refill);
            let work = match step {
                Step::Work { ns, jitter_pct: 0 } => ns.max(1) + refill,
                Step::Work { ns, jitter_pct } => {
                    self.rng.jitter(ns, f64::from(jitter_pct) / 100.0).max(1) + refill
                }
                Step::WorkUntil { at } => at.saturating_sub(now).max(1),
                Step::SleepUntil { at } => return self.sleep_until(cpu, t, at),
                Step::Block => {
                    self.note_deadlock(now);
                    self.set_remaining(t, 0);
                    self.smp.block(cpu, now, t).expect("the stepping thread runs");
                    self.after_core_call(cpu);
                    return self.reschedule(cpu);
                }
                Step::Yield => {
                    self.set_remaining(t, 0);
                    self.smp.yield_now(cpu, now).expect("a simulated CPU");
                    self.after_core_call(cpu);
                    return self.reschedule(cpu);
                }
                Step::Fork { task } => {
                    let Some(run) = self.program.as_mut() else { return };
                    // A fork past the world's table, or one the machine has no room for,
                    // starts no thread (as on the kernel), with a warning at the first.
                    let full = self.tasks.len >= run.room;
                    let refused = match run.world.fork(&run.prog, th, task, now) {
                        Ok(child) if full => {
                            run.world.abandon(child, now, &mut Collect::default());
                            Some(format!("the machine holds {} threads", run.room))
                        }
                        Ok(child) => match self.spawn_thread(cpu, child) {
                            Ok(()) => None,
                            Err(e) => {
                                let Some(run) = self.program.as_mut() else { return };
                                run.world.abandon(child, now, &mut Collect::default());
                                Some(format!("no room for its thread ({e})"))
                            }
                        },
                        Err(_) => Some("the thread table is full".to_string()),
                    };
                    if let (Some(why), Some(run)) = (refused, self.program.as_mut()) {
                        if !run.fork_refused {
                            run.fork_refused = true;
                            eprintln!("warning: a fork of task {task} is refused: {why} (and any later one)");
                        }
                    }
                    continue;
                }
                Step::Exit => unreachable!("an exit returned above"),
            };
            let until = match step {
                Step::WorkUntil { at } => Some(at),
                _ => None,
            };
            self.set_step(t, work, until);
            return if self.smp.need_resched(cpu) { self.reschedule(cpu) } else { self.arm_done(cpu) };
        }
    }

    /// Task `t`'s next step is `ns` of work (not wall time: see `TaskSim::until`).
    fn set_remaining(&mut self, t: TaskId, ns: u64) {
        self.set_step(t, ns, None);
    }

    /// Task `t`'s next step: `ns` from now, as work, or ending at wall time `until`. A cache
    /// refill it owed is in `ns` or behind it.
    fn set_step(&mut self, t: TaskId, ns: u64, until: Option<u64>) {
        if let Some(s) = self.tasks.get_mut(&t) {
            s.remaining = ns;
            s.until = until;
            s.refill = 0;
        }
    }

    /// Task `t`, running on `cpu`, sleeps until `at`.
    fn sleep_until(&mut self, cpu: usize, t: TaskId, at: u64) {
        self.set_remaining(t, 0);
        self.smp.block(cpu, self.now, t).expect("the stepping thread runs");
        self.after_core_call(cpu);
        self.push(at, Ev::Wake(t));
        self.reschedule(cpu);
    }

    /// In a program without a `duration`, which would wait for its threads for ever (the
    /// kernel's as well), notes the first moment every live thread waits for another
    /// (`World::stuck`, after a block or an end): the run and its figures end there.
    fn note_deadlock(&mut self, now: u64) {
        let Some(run) = self.program.as_deref_mut() else { return };
        if run.deadlocked_at.is_some() || !run.world.ends_stuck(&run.prog) {
            return;
        }
        run.deadlocked_at = Some(now);
        self.halted = true;
        let at = now.saturating_sub(run.t0) as f64 / 1e6;
        eprintln!("warning: the workload deadlocks at {at:.3} ms: every live thread waits for another");
    }

    /// When the program deadlocked (every live thread waiting for another), if it did: its
    /// run ends there.
    pub fn program_deadlock(&self) -> Option<u64> {
        self.program.as_ref().and_then(|r| r.deadlocked_at)
    }

    /// When the program's run was cut at [`MAX_ACTIVATIONS`], if it was: the machine stays
    /// halted there, and the figures end there.
    pub fn program_cut(&self) -> Option<u64> {
        self.program.as_ref().and_then(|r| r.cut_at)
    }

    /// rt-app's figures per task of the program run so far (empty without one), and the
    /// threads still blocked on a mutex, condition variable or barrier.
    pub fn program_figures(&mut self) -> (Vec<TaskFigures>, usize) {
        for cpu in 0..self.cpus.len() {
            self.account(cpu);
        }
        let Some(run) = self.program.as_ref() else { return (Vec::new(), 0) };
        let mut cpu_ns = run.cpu_ns.clone();
        // The live threads' CPU time so far.
        for s in run.threads.iter().filter_map(|(id, _, _)| self.tasks.get(id)) {
            if let Some(task) = match s.behavior {
                Behavior::Program { thread } => run.world.task_of(thread),
                _ => None,
            } {
                cpu_ns[task as usize] += s.ran_ns;
            }
        }
        let names: Vec<String> = run.prog.tasks().map(|t| t.name().to_string()).collect();
        let end = run.deadlocked_at.unwrap_or(self.now);
        let figures = per_task(&names, &run.acts, &cpu_ns, end.saturating_sub(run.t0), self.cpus.len());
        (figures, run.world.blocked())
    }
}
