//! The `program` scenario: the workload program the runner loaded (an rt-app file, lowered
//! by sched-workload) run by kernel threads, one per program thread. Each thread asks the one
//! shared [`World`] what to do next and does it with the kernel's calls: busy work, `sleep`,
//! `park` (woken by `unpark` when another thread's step frees what it waits for), `yield`,
//! `spawn` for a fork. Every activation is a log line, and each thread's CPU time at the end;
//! the runner computes rt-app's figures from them, with the definitions the simulator uses.
//!
//! Lines (times in ns from the workload's start):
//! `program: act thread=T task=K phase=P start=S end=E run=R slack=X wake=W cpu=C` (`slack`
//! `-9223372036854775808` and `wake` `18446744073709551615`: none), `program: time thread=T
//! task=K ns=N`, for a program with a pool of events the sysbench report over the threads
//! that take from it (`program: total time`, `event latency`, `spread time`, `one-per-CPU
//! time`, as `scenario=sysbench` prints them), the kernel's per-CPU report (`program:
//! migrations ...`), `program: end ns=N blocked=B`.

use portable_atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicUsize,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};
use sched_workload::interp::{Activation, Host, Step, ThreadId, World};
use sched_workload::Program;

use super::bench::{report_spread, track_workers};
use super::{
    finish, mix, ncpus, record_latency, report_cpus, report_latency, ThreadKind, EXIT_BAD_ARGS,
    EXIT_BAD_PROGRAM, EXIT_FAILED, EXIT_MACHINE, SB_SEED,
};
use crate::arch::{self, MAX_THREADS};
use crate::kprintln;
use crate::sched;

/// Program threads this kernel runs (its thread pool less the main thread).
const THREADS: usize = MAX_THREADS - 1;
/// No kernel thread (yet).
const NO_SLOT: usize = usize::MAX;

/// The program, once checked.
static PROGRAM: spin::Once<Program<'static>> = spin::Once::new();
/// Every program thread's place and the shared resources. Taken after no other lock, and no
/// core call is made while it is held (the lock order: [`arch::Lock`]).
static WORLD: arch::Lock<World<THREADS>> = arch::Lock::new(World::new(0));
/// Each program thread's kernel thread slot.
static SLOTS: [AtomicUsize; THREADS] = [const { AtomicUsize::new(NO_SLOT) }; THREADS];
/// Each program thread's CPU time when it exited (ns).
static CPU_NS: [AtomicU64; THREADS] = [const { AtomicU64::new(0) }; THREADS];
/// Program threads not yet exited; the last to exit unparks the main thread.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// When the live threads last went to none (ns): with none left at the end, the run ended
/// there, as the simulator's and rt-app's do, however long the `duration`.
static NONE_LIVE_AT: AtomicU64 = AtomicU64::new(0);
static MAIN_SLOT: AtomicUsize = AtomicUsize::new(NO_SLOT);
/// When the workload started (ns).
static T0: AtomicU64 = AtomicU64::new(0);
/// The workers (the threads of tasks that `take` from a pool) the run will have, whether the
/// first was created, when the last ended (ns), and the pool events they finished.
static WORKERS: AtomicU32 = AtomicU32::new(0);
static WORKERS_STARTED: AtomicBool = AtomicBool::new(false);
static LAST_WORKER_END: AtomicU64 = AtomicU64::new(0);
static EVENTS_DONE: AtomicU64 = AtomicU64::new(0);
/// The busy loop's speed: ns per 1000 units, measured at the start.
static NS_PER_KUNIT: AtomicU64 = AtomicU64::new(1000);

/// `units` turns of the busy loop.
fn spin_units(units: u64) {
    let mut x = 0u64;
    for i in 0..units {
        x = core::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
    }
    core::hint::black_box(x);
}

/// `ns` of busy work at the machine's full speed (a `run`): as many turns of the busy loop as
/// take that long on a CPU of its own.
fn work(ns: u64) {
    spin_units(ns.saturating_mul(1000) / NS_PER_KUNIT.load(Relaxed).max(1));
}

/// The run's main thread: checks the loaded program, starts its threads, waits for the
/// workload's `duration` or for every thread to finish, then reports.
pub(super) fn program_main() {
    let Some(bytes) = arch::loaded_program() else {
        defmt::error!("error: bad argument \"scenario=program\": this machine takes no workload program");
        arch::exit(EXIT_BAD_ARGS);
    };
    let prog = match Program::parse(bytes) {
        Ok(p) => p,
        Err(e) => {
            defmt::error!("error: the workload program is refused: {}", defmt::Display2Format(&e));
            arch::exit(EXIT_BAD_PROGRAM);
        }
    };
    // Forks included; with forks without bound, those started with it (a fork past the table
    // is refused when it comes, with a warning).
    let threads = prog.thread_bound().min(usize::MAX as u64) as usize;
    if threads > THREADS {
        defmt::error!(
            "error: the workload program has {} threads, this kernel runs at most {}",
            threads,
            THREADS
        );
        arch::exit(EXIT_MACHINE);
    }
    if let Some((t, mask, cpu)) = prog.mask_past_cpus(ncpus()) {
        defmt::error!(
            "error: task {} of the workload program: its CPU mask {=u64:#x} names CPU {}, past this machine's {} CPUs",
            t.name(),
            mask,
            cpu,
            ncpus()
        );
        arch::exit(EXIT_MACHINE);
    }
    MAIN_SLOT.store(sched::current_thread().unwrap_or(NO_SLOT), Release);
    // The busy loop's speed, on this CPU while nothing else runs.
    let probe = 200_000;
    let t = arch::now_ns();
    spin_units(probe);
    NS_PER_KUNIT.store(((arch::now_ns() - t) * 1000 / probe).max(1), Relaxed);
    let t0 = arch::now_ns();
    T0.store(t0, Relaxed);
    let prog = *PROGRAM.call_once(|| prog);
    let workers = prog.workers();
    WORKERS.store(workers, Relaxed);
    {
        let mut w = WORLD.lock();
        w.set_start(t0);
        if w.spawn_all(&prog).is_err() {
            defmt::error!("error: the workload program does not fit the kernel's table");
            arch::exit(EXIT_MACHINE);
        }
    }
    kprintln!(
        "program: {} tasks, {} threads, duration {} us, busy loop {} ns per 1000 turns",
        prog.tasks().count(),
        threads,
        prog.duration_us(),
        NS_PER_KUNIT.load(Relaxed)
    );
    // The threads are created a little apart, by `seed=`'s choice (0..50 µs of the main
    // thread's work before each), as a real start-up staggers them: each seed another run.
    let seed = SB_SEED.load(Relaxed) as u64;
    let started = WORLD.lock().len();
    for th in 0..started {
        work(mix(seed << 32 | th as u64) % 50_000);
        if !spawn(&prog, th as ThreadId) {
            defmt::error!("error: cannot create the thread of program thread {}", th);
            arch::exit(EXIT_FAILED);
        }
    }
    match prog.duration_us() {
        0 => {
            while LIVE.load(Acquire) > 0 {
                arch::sys_park();
                if WORLD.lock().stuck() {
                    kprintln!("program: deadlock: every live thread waits for another; the run ends");
                    break;
                }
            }
        }
        d => arch::sys_sleep((t0 + d * 1000).saturating_sub(arch::now_ns())),
    }
    let now = arch::now_ns();
    let ended = NONE_LIVE_AT.load(Acquire);
    let end = if LIVE.load(Acquire) == 0 && ended > t0 { ended.min(now) } else { now };
    let (n, blocked, tasks) = {
        let w = WORLD.lock();
        let tasks: [u16; THREADS] = core::array::from_fn(|t| w.task_of(t as ThreadId).unwrap_or(0));
        (w.len(), w.blocked(), tasks)
    };
    for (th, &task) in tasks.iter().enumerate().take(n) {
        let slot = SLOTS[th].load(Acquire);
        let exited = CPU_NS[th].load(Acquire);
        let ns = if exited > 0 || slot == NO_SLOT { exited } else { sched::thread_cpu_ns_now(slot) };
        defmt::info!("program: time thread={=usize} task={=u16} ns={=u64}", th, task, ns);
    }
    if workers > 0 {
        // The seed's figures of a sysbench-like program, as `scenario=sysbench` reports them.
        let (first, last) = (super::T0.load(Relaxed), LAST_WORKER_END.load(Relaxed));
        let done = EVENTS_DONE.load(Relaxed);
        let size: u64 = prog.pools().map(|(size, _)| u64::from(size)).sum();
        kprintln!("program: total time {} us for {} events", last.saturating_sub(first) / 1000, done);
        report_latency("program", "event", done as u32);
        kprintln!("program: {} of the pools' {} events done", done, size);
        report_spread("program", workers as usize, ncpus());
    }
    report_cpus("program", ncpus());
    kprintln!("program: end ns={} blocked={}", end - t0, blocked);
    finish(true)
}

/// Starts the kernel thread of program thread `th`; false if the kernel has no room for it.
fn spawn(prog: &Program<'_>, th: ThreadId) -> bool {
    let Some(t) = WORLD.lock().task_of(th) else { return false };
    let Some(task) = prog.task(t as usize) else { return false };
    let kind = if task.takes() {
        if !WORKERS_STARTED.swap(true, AcqRel) {
            track_workers(WORKERS.load(Relaxed));
        }
        ThreadKind::ProgramWorker
    } else {
        ThreadKind::Program
    };
    // (Counted live first: the thread may run, and end, before the spawn returns.)
    LIVE.fetch_add(1, AcqRel);
    // (This kernel's machines have at most 64 CPUs: every CPU is every bit.)
    let slot = arch::sys_spawn(kind.number(), th as usize, task.nice(), task.cpus().unwrap_or(u64::MAX));
    if slot < 0 {
        LIVE.fetch_sub(1, AcqRel);
        return false;
    }
    // (The thread may have stored it first.)
    let _ = SLOTS[th as usize].compare_exchange(NO_SLOT, slot as usize, AcqRel, Relaxed);
    true
}

/// What a step asked of the others: threads to wake, activations to log.
struct KernelHost {
    wakes: [ThreadId; THREADS],
    nwakes: usize,
    acts: [Option<Activation>; 4],
    /// A pool event was taken: the step's work is it.
    taken: bool,
}

impl KernelHost {
    /// Nothing asked yet.
    fn new() -> KernelHost {
        KernelHost { wakes: [0; THREADS], nwakes: 0, acts: [None; 4], taken: false }
    }
}

/// Lets the main thread, waiting for the program's threads to end, go on.
fn unpark_main() {
    let main = MAIN_SLOT.load(Acquire);
    if main != NO_SLOT {
        arch::sys_unpark(main);
    }
}

impl Host for KernelHost {
    fn wake(&mut self, t: ThreadId) {
        if self.nwakes < THREADS {
            self.wakes[self.nwakes] = t;
            self.nwakes += 1;
        }
    }

    fn activation(&mut self, a: &Activation) {
        if let Some(free) = self.acts.iter_mut().find(|a| a.is_none()) {
            *free = Some(*a);
        }
    }

    fn taken(&mut self, _: ThreadId, _: u16, _: u32) {
        self.taken = true;
    }
}

/// The body of program thread `th`.
pub(super) fn program_thread(th: usize) {
    let Some(&prog) = PROGRAM.get() else { return };
    let me = sched::current_thread().unwrap_or(NO_SLOT);
    SLOTS[th].store(me, Release);
    let th = th as ThreadId;
    let t0 = T0.load(Relaxed);
    // The EEVDF slice its task asks for (the program checked its range).
    let slice = WORLD.lock().task_of(th).and_then(|t| prog.task(t as usize)).map_or(0, |t| t.slice_us());
    if slice != 0 && sched::set_slice(me, u64::from(slice) * 1000).is_err() {
        defmt::error!("error: program thread {} cannot get its slice of {} us", th, slice);
        arch::exit(EXIT_FAILED);
    }
    // rt-app's `delay`: the thread begins at its start.
    let start = WORLD.lock().start_of(th);
    let now = arch::now_ns();
    if start > now {
        arch::sys_sleep(start - now);
    }
    let mut applied = u64::MAX;
    loop {
        let now = arch::now_ns();
        let mut host = KernelHost::new();
        let (step, cpus) = {
            let mut w = WORLD.lock();
            w.running(th, now);
            let step = w.step(&prog, th, now, &mut host);
            (step, w.cpus_of(&prog, th).unwrap_or(u64::MAX))
        };
        for &w in &host.wakes[..host.nwakes] {
            let slot = SLOTS[w as usize].load(Acquire);
            if slot != NO_SLOT {
                arch::sys_unpark(slot);
            }
        }
        for a in host.acts.iter().flatten() {
            defmt::info!(
                "program: act thread={=u16} task={=u16} phase={=u16} start={=u64} end={=u64} run={=u64} slack={=i64} wake={=u64} cpu={=usize}",
                a.thread,
                a.task,
                a.phase,
                a.start.saturating_sub(t0),
                a.end.saturating_sub(t0),
                a.run_ns,
                a.slack_ns.unwrap_or(i64::MIN),
                a.wake_latency_ns.unwrap_or(u64::MAX),
                arch::cpu_id()
            );
        }
        if cpus != applied && step != Step::Exit {
            applied = cpus;
            arch::sys_set_affinity(me, cpus);
        }
        match step {
            // A pool's jitter is the simulator's model of a machine's variation; this machine
            // has its own.
            Step::Work { ns, .. } if host.taken => {
                // A pool event: its latency is its work's, preemption included.
                let t = arch::now_ns();
                work(ns);
                record_latency(arch::now_ns() - t);
                EVENTS_DONE.fetch_add(1, Relaxed);
            }
            Step::Work { ns, .. } => work(ns),
            Step::WorkUntil { at } => {
                while arch::now_ns() < at {
                    spin_units(64);
                }
            }
            Step::SleepUntil { at } => arch::sys_sleep(at.saturating_sub(arch::now_ns()).max(1)),
            Step::Block => {
                // If every thread now waits for another, none will wake this one: the main
                // thread, waiting for the threads to end, ends the run instead.
                if WORLD.lock().ends_stuck(&prog) {
                    unpark_main();
                }
                arch::sys_park()
            }
            Step::Yield => arch::sys_yield(),
            Step::Fork { task } => {
                let child = WORLD.lock().fork(&prog, th, task, now);
                match child {
                    Ok(child) if spawn(&prog, child) => {}
                    Ok(child) => {
                        // It starts no thread, as a fork past the table.
                        WORLD.lock().abandon(child, now, &mut KernelHost::new());
                        defmt::warn!(
                            "program: a fork of task {=u16} is refused: no room for its thread",
                            task
                        )
                    }
                    Err(_) => defmt::warn!(
                        "program: a fork of task {=u16} is refused: the thread table is full",
                        task
                    ),
                }
            }
            Step::Exit => break,
        }
    }
    if WORLD.lock().task_of(th).and_then(|t| prog.task(t as usize)).is_some_and(|t| t.takes()) {
        LAST_WORKER_END.fetch_max(arch::now_ns(), AcqRel);
    }
    CPU_NS[th as usize].store(sched::thread_cpu_ns_now(me).max(1), Release);
    // The last thread's end, or one that leaves every other waiting (a deadlock: none of
    // them will end), lets the main thread go on.
    let last = LIVE.fetch_sub(1, AcqRel) == 1;
    if last {
        NONE_LIVE_AT.fetch_max(arch::now_ns(), AcqRel);
    }
    if last || WORLD.lock().ends_stuck(&prog) {
        unpark_main();
    }
}
