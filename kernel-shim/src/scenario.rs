//! Workloads chosen on the kernel command line (`/chosen/bootargs`, QEMU `-append`):
//!
//! * `scenario=boot`: every CPU online and ticking, an IPI to each CPU and back; exit 0.
//! * `scenario=sysbench threads=N events=M maxprime=P`: N threads take M prime-counting
//!   events from one shared counter; latency, per-thread counts, an exactly-once check and
//!   the spread time; exit 0 if every check passes, else 1.
//! * `scenario=pingpong pairs=P rounds=R`: P pairs of threads wake each other R times
//!   (park/unpark: `block` and `wake` through the core); round-trip latency, counts,
//!   migrations by reason; exit 0 if every check passes, else 1.
//! * `scenario=panic cpu=C`: a thread pinned to CPU C panics; the panic handler exits 101.
//! * `scenario=fault fault=udf|stack cpu=C`: a thread pinned to CPU C executes an undefined
//!   instruction, or overflows its stack; the kernel reports it and exits 101.
//!
//! * `scenario=wakeone threads=N events=M`: sysbench workers created pinned to CPU 0, then
//!   widened to all CPUs: only the load balancer spreads them; spread time, exactly-once.
//! * `scenario=affinity`: 4 threads pinned to CPU 1, 2 to CPU 6, 8 free; no thread may be
//!   switched in outside its affinity; when each CPU first ran a scenario thread is reported.
//! * `scenario=nice threads=N nice=K events=M`: half the threads at nice 0, half at nice K,
//!   all on one CPU; their CPU-time ratio must be within `NICE_MARGIN_PCT` (15 %) of the weight ratio.
//! * `scenario=churn ops=N seed=S`: random spawn/exit/park/unpark/yield/sleep until N
//!   operations; every thread must start and exit exactly once.
//! * `scenario=hang cpu=C`: a thread on CPU C spins with IRQs masked; the watchdog exits 5.
//! * `scenario=program`: the workload program the runner loaded (an rt-app file, lowered),
//!   one kernel thread per program thread; exit 0, 3 if no valid program was loaded.
//! * `scenario=groups duration_ms=D`: task groups as cgroup v2 has them, in kselftest
//!   test_cpu.c's shapes (weights 50/100/150 over- and under-provisioned, a nested hierarchy
//!   in rounds, 40 threads against one, `cpu.max` "10000 100000") and LTP cfs_bandwidth01's
//!   churn; D ms per case or round (default 1000) after a quarter of it of warm-up; exit 0
//!   if every group ran (`scenario/groups.rs`). Not on a microcontroller.
//! * `scenario=latency spinners=N periodic=M run_us=R sleep_us=S short_slice_us=L
//!   duration_ms=D policy=both|cfs|eevdf`: N spinners and M periodic threads (R µs of CPU, S
//!   µs asleep, every other one with an EEVDF slice of L µs), D ms under CFS and then D ms
//!   under EEVDF, switched at run time (or one of them); wake-to-run mean/p50/p99/max and CPU
//!   shares per group; exit 0 if every group ran. Not on a microcontroller (no EEVDF there).
//!
//! Every scenario that finishes also runs the core's `check_invariants` before exiting.
//! Common keys: `hz=` (100, 250, 300, 1000), `nohz=on|off` (idle CPUs stop their tick;
//! default off), `features=` (comma-separated core feature
//! switches, `NO_` to turn one off). Anything unknown or malformed, or a key the chosen
//! scenario does not read (`keys.rs`): one error line, exit 3.

use portable_atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};

use sched_core::{MigrateReason, Outcome};

use crate::arch;
use crate::kprintln;
use crate::sched;

mod bench;
mod boot;
mod bootline;
mod churn;
mod corecalls;
#[cfg(not(target_arch = "arm"))]
mod groups;
mod hang;
mod keys;
#[cfg(not(target_arch = "arm"))]
mod latency;
mod pingpong;
// (A microcontroller takes no workload program: see `arch::loaded_program`.)
#[cfg(not(target_arch = "arm"))]
mod program;

use bench::{bench_main, on_switch, on_tick, spinner, Mode};
use boot::boot;
pub use bootline::{ArgError, Config, Fault, Latency, Policies, Scenario};
use churn::{churn_child, churn_main};
use corecalls::{corecalls, corecalls_main};
use hang::{hang, hang_main};
#[cfg(not(target_arch = "arm"))]
use latency::{latency_main, lt_spinner, periodic};
use pingpong::{ping, pingpong_main, pong};

/// Exit code for a bad command line.
pub const EXIT_BAD_ARGS: u32 = 3;
/// Exit code when the machine is not what the kernel needs (no DTB, no PSCI, ...).
pub const EXIT_MACHINE: u32 = 4;
/// Exit code when a scenario's check fails.
pub const EXIT_FAILED: u32 = 1;
/// Exit code when the workload program loaded for `scenario=program` is missing or damaged
/// (`sched_workload::Program::parse` refuses it).
pub const EXIT_BAD_PROGRAM: u32 = 6;

/// What a kernel thread runs: `sched::spawn`'s and `sys_spawn`'s `kind`, as its number.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ThreadKind {
    /// The scenario's main thread, the first one.
    Main,
    /// A sysbench worker.
    Spinner,
    /// The thread that panics on purpose.
    Panic,
    /// The side of a pingpong pair that starts each round.
    Ping,
    /// The side of a pingpong pair that answers.
    Pong,
    /// The thread that faults on purpose (arg: 0 udf, 1 stack overflow).
    Fault,
    /// A spinner pinned to one CPU (`scenario=affinity`); works like a sysbench worker.
    Pinned,
    /// A churn thread (arg: its serial number).
    Churn,
    /// The thread that masks IRQs and spins forever (`scenario=hang`).
    Hang,
    /// A thread that keeps its CPU busy (and ticking) with yields (`scenario=hang`).
    Busy,
    /// A thread that calls the core from thread context in a loop (`scenario=corecalls`; arg:
    /// rounds).
    CoreCalls,
    /// A periodic thread of `scenario=latency` (arg: its number).
    Periodic,
    /// A spinner of `scenario=latency`.
    LatencySpinner,
    /// A thread of the workload program (arg: its number in the program's run).
    Program,
    /// A thread of the workload program that takes events from a pool (a sysbench worker,
    /// whose spread is measured as the spinners' is).
    ProgramWorker,
    /// A thread of `scenario=groups` (arg: what it does, spin or run and sleep).
    GroupSpinner,
}

impl ThreadKind {
    /// Every kind, in number order.
    const ALL: [ThreadKind; 16] = [
        ThreadKind::Main,
        ThreadKind::Spinner,
        ThreadKind::Panic,
        ThreadKind::Ping,
        ThreadKind::Pong,
        ThreadKind::Fault,
        ThreadKind::Pinned,
        ThreadKind::Churn,
        ThreadKind::Hang,
        ThreadKind::Busy,
        ThreadKind::CoreCalls,
        ThreadKind::Periodic,
        ThreadKind::LatencySpinner,
        ThreadKind::Program,
        ThreadKind::ProgramWorker,
        ThreadKind::GroupSpinner,
    ];

    /// Its number, what `sys_spawn` carries and `sched` stores.
    pub const fn number(self) -> usize {
        self as usize
    }

    /// The kind numbered `n`, if any.
    pub fn from_number(n: usize) -> Option<ThreadKind> {
        Self::ALL.get(n).copied()
    }
}

/// Most events a sysbench run may ask for (one done-flag each).
#[cfg(not(target_arch = "arm"))]
pub const MAX_EVENTS: u32 = 65_536;
/// Most sysbench threads (the pool keeps one for the main thread).
#[cfg(not(target_arch = "arm"))]
pub const MAX_SPINNERS: u32 = 56;
/// Most pingpong pairs.
#[cfg(not(target_arch = "arm"))]
pub const MAX_PAIRS: u32 = 28;
/// Most events a sysbench run may ask for (one done-flag each).
#[cfg(target_arch = "arm")]
pub const MAX_EVENTS: u32 = 4096;
/// Most sysbench threads (the pool keeps one for the main thread).
#[cfg(target_arch = "arm")]
pub const MAX_SPINNERS: u32 = 6;
/// Most pingpong pairs.
#[cfg(target_arch = "arm")]
pub const MAX_PAIRS: u32 = 3;
// A microcontroller's pool holds 8 threads and its RAM a few KB of done-flags.
#[cfg(target_arch = "arm")]
const _: () = assert!((MAX_SPINNERS as usize) < arch::MAX_THREADS && 2 * MAX_PAIRS <= MAX_SPINNERS);

static SCENARIO: spin::Once<Scenario> = spin::Once::new();
static NCPUS: AtomicU32 = AtomicU32::new(1);

/// Creates the scenario's main thread (on CPU 0, during boot, IRQs masked).
pub fn start(cfg: &Config, ncpus: usize) {
    sched::set_hooks(sched::Hooks { thread_main, on_tick, on_switch });
    SCENARIO.call_once(|| cfg.scenario);
    NCPUS.store(ncpus as u32, Relaxed);
    if let Scenario::Panic { cpu } | Scenario::Fault { cpu, .. } | Scenario::Hang { cpu } = cfg.scenario {
        if cpu as usize >= ncpus {
            defmt::error!("error: bad argument \"cpu={}\": this machine has CPUs 0..{}", cpu, ncpus - 1);
            arch::exit(EXIT_BAD_ARGS);
        }
    }
    if matches!(cfg.scenario, Scenario::Hang { .. }) && ncpus < 2 {
        defmt::error!("error: bad argument \"scenario=hang\": needs 2 CPUs (one hangs, one watches)");
        arch::exit(EXIT_BAD_ARGS);
    }
    let needs = cfg.scenario.threads(ncpus as u32);
    if needs as usize > arch::MAX_THREADS {
        defmt::error!(
            "error: bad argument \"scenario={}\": it runs {} threads on {} CPUs, this kernel at most {}",
            cfg.scenario.name(),
            needs,
            ncpus,
            arch::MAX_THREADS
        );
        arch::exit(EXIT_BAD_ARGS);
    }
    if let Err(e) = sched::spawn(0, arch::now_ns(), ThreadKind::Main.number(), 0, 0, u64::MAX) {
        defmt::error!("error: cannot create the main thread: {}", defmt::Debug2Format(&e));
        arch::exit(EXIT_MACHINE);
    }
}

/// Entry of every kernel thread.
pub fn thread_main(kind: usize, arg: usize) {
    let Some(kind) = ThreadKind::from_number(kind) else { return };
    match kind {
        ThreadKind::Main => match SCENARIO.get() {
            Some(Scenario::Boot) => boot(),
            Some(&Scenario::Sysbench { threads, events, maxprime }) => {
                bench_main(Mode::Sysbench, threads, events, maxprime, 0)
            }
            Some(&Scenario::Wakeone { threads, events, maxprime }) => {
                bench_main(Mode::Wakeone, threads, events, maxprime, 0)
            }
            Some(&Scenario::Affinity { events, maxprime }) => {
                bench_main(Mode::Affinity, AFF_FREE, events, maxprime, 0)
            }
            Some(&Scenario::Nice { threads, nice, events, maxprime }) => {
                bench_main(Mode::Nice, threads, events, maxprime, nice)
            }
            Some(&Scenario::Churn { ops }) => churn_main(ops),
            Some(&Scenario::Hang { cpu }) => hang_main(cpu),
            Some(&Scenario::Corecalls { rounds }) => corecalls_main(rounds),
            #[cfg(not(target_arch = "arm"))]
            Some(&Scenario::Latency(l)) => latency_main(l),
            #[cfg(not(target_arch = "arm"))]
            Some(Scenario::Program) => program::program_main(),
            #[cfg(not(target_arch = "arm"))]
            Some(&Scenario::Groups { duration_ms }) => groups::groups_main(duration_ms),
            #[cfg(target_arch = "arm")]
            Some(Scenario::Program) => {}
            #[cfg(target_arch = "arm")]
            Some(Scenario::Latency(_)) | Some(Scenario::Groups { .. }) => {}
            Some(&Scenario::Panic { cpu }) => pinned_main(ThreadKind::Panic, cpu as usize, cpu),
            Some(&Scenario::Fault { fault, cpu }) => pinned_main(ThreadKind::Fault, fault as usize, cpu),
            Some(&Scenario::Pingpong { pairs, rounds }) => pingpong_main(pairs, rounds),
            None => {}
        },
        ThreadKind::Spinner | ThreadKind::Pinned => spinner(arg),
        ThreadKind::Churn => churn_child(arg),
        ThreadKind::Hang => hang(),
        ThreadKind::Busy => loop {
            arch::sys_yield();
        },
        ThreadKind::CoreCalls => corecalls(arg),
        #[cfg(not(target_arch = "arm"))]
        ThreadKind::Periodic => periodic(arg),
        #[cfg(not(target_arch = "arm"))]
        ThreadKind::LatencySpinner => lt_spinner(),
        ThreadKind::Ping => ping(arg),
        ThreadKind::Fault => fault(arg),
        ThreadKind::Pong => pong(arg),
        #[cfg(not(target_arch = "arm"))]
        ThreadKind::Program | ThreadKind::ProgramWorker => program::program_thread(arg),
        #[cfg(not(target_arch = "arm"))]
        ThreadKind::GroupSpinner => groups::group_spinner(arg),
        ThreadKind::Panic => panic!(
            "scenario=panic: requested panic (thread pinned to CPU {}, on CPU {})",
            arg,
            arch::cpu_id()
        ),
        // (The latency scenario is not built for the microcontrollers.)
        #[cfg(target_arch = "arm")]
        ThreadKind::Periodic
        | ThreadKind::LatencySpinner
        | ThreadKind::Program
        | ThreadKind::ProgramWorker
        | ThreadKind::GroupSpinner => {}
    }
}

/// Creates a thread of `kind` pinned to `cpu`.
fn pinned_main(kind: ThreadKind, arg: usize, cpu: u32) {
    if arch::sys_spawn(kind.number(), arg, 0, 1 << cpu) < 0 {
        defmt::error!("error: cannot create the thread for CPU {}", cpu);
        arch::exit(EXIT_FAILED);
    }
}

/// Faults on purpose; the kernel must report it and exit 101.
fn fault(what: usize) {
    kprintln!(
        "fault: thread on CPU {} about to fault ({})",
        arch::cpu_id(),
        if what == 0 { "udf" } else { "stack" }
    );
    if what == Fault::Udf as usize {
        arch::undefined_instruction();
    } else if let Some(slot) = sched::current_thread() {
        core::hint::black_box(deep_to(arch::thread_bottom(slot)));
    }
    // Still here: the stack check runs when this thread leaves the CPU.
}

/// Recurses in frames of about 512 bytes until one reaches the canary's band at `bottom`
/// (the thread stack's lowest address): an overflow into the band, which the canary check
/// reports, and less than a frame below the stack, not a run over whatever lies below it.
fn deep_to(bottom: usize) -> u64 {
    let mut buf = [0u8; 512];
    core::hint::black_box(&mut buf);
    if (buf.as_ptr() as usize) < bottom + arch::CANARY_BYTES {
        return buf[0] as u64;
    }
    deep_to(bottom) + core::hint::black_box(buf[7]) as u64
}

fn ncpus() -> usize {
    NCPUS.load(Relaxed) as usize
}

/// Waits until `cond` holds (true) or the deadline passes (false), spinning with `yield`.
fn wait_until(deadline_ns: u64, cond: impl Fn() -> bool) -> bool {
    wait_with(deadline_ns, cond, arch::relax)
}

/// Waits until `cond` holds or the deadline passes, calling `pause` between checks.
fn wait_with(deadline_ns: u64, cond: impl Fn() -> bool, pause: fn()) -> bool {
    loop {
        if cond() {
            return true;
        }
        if arch::now_ns() > deadline_ns {
            return false;
        }
        pause();
    }
}

// ---- shared by the workloads ---------------------------------------------------------------

/// Workload jitter seed (`seed=`): with a non-zero seed each sysbench thread starts with a
/// seed-dependent offset of busy work (0..7 × 16 µs, before the start barrier), so
/// deterministic runs differ per seed the way real thread start times do. 0: no offset.
static SB_SEED: AtomicU32 = AtomicU32::new(0);

/// SplitMix64 step, for the start offsets.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The sysbench main thread's busy work before each worker's creation (`create_us=`, ns; 0:
/// none, the kernel creates threads as fast as it can, a few µs apart).
static SB_CREATE_NS: AtomicU64 = AtomicU64::new(0);
/// Each sysbench worker's busy set-up before the start barrier (`setup_us=`, ns), in place
/// of the seeded start offset; `u64::MAX`: not given.
static SB_SETUP_NS: AtomicU64 = AtomicU64::new(u64::MAX);

/// sysbench starts its threads together: each waits at a start barrier until all have
/// arrived (`barrier=on`, the default). Threads that block right after creation leave their
/// CPU idle again, which is what lets fork placement stack them (docs/linux-v5.7.md §5).
static SB_BARRIER: AtomicBool = AtomicBool::new(true);

static LAT_MIN: AtomicU64 = AtomicU64::new(u64::MAX);

static LAT_MAX: AtomicU64 = AtomicU64::new(0);

static LAT_SUM: AtomicU64 = AtomicU64::new(0);

/// Latency histogram: bucket i counts events of [2^i, 2^(i+1)) µs (bucket 0 also < 1 µs).
static LAT_HIST: [AtomicU32; 24] = [const { AtomicU32::new(0) }; 24];

static T0: AtomicU64 = AtomicU64::new(0);

fn record_latency(lat: u64) {
    LAT_MIN.fetch_min(lat, Relaxed);
    LAT_MAX.fetch_max(lat, Relaxed);
    LAT_SUM.fetch_add(lat, Relaxed);
    let us = lat / 1000;
    let b = if us == 0 { 0 } else { (63 - us.leading_zeros()) as usize };
    LAT_HIST[b.min(LAT_HIST.len() - 1)].fetch_add(1, Relaxed);
}

fn report_latency(tag: &str, what: &str, count: u32) {
    kprintln!(
        "{}: {} latency min {} us avg {} us max {} us",
        tag,
        what,
        LAT_MIN.load(Relaxed) / 1000,
        LAT_SUM.load(Relaxed) / count.max(1) as u64 / 1000,
        LAT_MAX.load(Relaxed) / 1000
    );
    for (i, h) in LAT_HIST.iter().enumerate() {
        let c = h.load(Relaxed);
        if c != 0 {
            kprintln!(
                "{}: {} latency [{} us, {} us): {}",
                tag,
                what,
                if i == 0 { 0 } else { 1u64 << i },
                1u64 << (i + 1),
                c
            );
        }
    }
}

fn report_cpus(tag: &str, n: usize) {
    let totals = sched::totals();
    let lags = [
        ("start lag (runnable -> running)", "starts", totals.start_lag),
        ("wake-up lag (an idle CPU handed a thread -> it runs one)", "wake-ups", totals.wake_lag),
    ];
    for (what, unit, (n, sum, max)) in lags {
        kprintln!(
            "{}: {=str}: {} {=str}, mean {} us, max {} us",
            tag,
            what,
            n,
            unit,
            sum / n.max(1) / 1000,
            max / 1000
        );
    }
    let m = totals.migrations_by_reason;
    kprintln!(
        "{}: migrations {} (wakeup {}, placement {}, balance {}, active balance {}, affinity {})",
        tag,
        totals.migrations,
        m[MigrateReason::Wakeup.index()],
        m[MigrateReason::Placement.index()],
        m[MigrateReason::Balance.index()],
        m[MigrateReason::ActiveBalance.index()],
        m[MigrateReason::Affinity.index()]
    );
    for c in 0..n {
        let cc = sched::cpu_figures(c);
        kprintln!(
            "{}: cpu {} ticks {} switches {} migrations-in {} balance runs {} moved {} resched IPIs sent {} received {}",
            tag,
            c,
            cc.ticks,
            cc.switches,
            cc.migrations_in,
            cc.balance_runs,
            cc.balance_moved,
            cc.resched_sent,
            cc.resched_ipis
        );
        kprintln!(
            "{}: cpu {} time in handlers {} us, longest {} us",
            tag,
            c,
            cc.handler_ns / 1000,
            cc.handler_max_ns / 1000
        );
        let bal = sched::with_core(|k| k.balance_report(c)).unwrap_or_default();
        kprintln!(
            "{}: cpu {} nohz: tickless (core {}, kernel {}), pending kick {}, next balance jiffy {}, now jiffy {}",
            tag,
            c,
            bal.tickless,
            sched::is_tickless(c),
            bal.kick_pending,
            bal.next_balance,
            arch::now_ns() / (1_000_000_000 / sched::hz() as u64)
        );
        let o = &cc.balance_outcomes;
        kprintln!(
            "{}: cpu {} balance outcomes: not designated {} balanced {} moved {} nothing detachable {} all pinned {} active balance {} (rounds: redirected {} retried {})",
            tag,
            c,
            o[Outcome::NotDesignated.index()],
            o[Outcome::Balanced.index()],
            o[Outcome::Moved.index()],
            o[Outcome::NothingDetachable.index()],
            o[Outcome::AllPinned.index()],
            o[Outcome::ActiveBalance.index()],
            o[Outcome::Redirected.index()],
            o[Outcome::Retried.index()]
        );
    }
}

/// Ends a scenario that ran to its end: the stacks' high-water marks, which the suite judges
/// after every such run, then exit 0 if `ok`, else [`EXIT_FAILED`].
fn finish(ok: bool) -> ! {
    let deepest = (0..ncpus()).map(arch::exc_stack_high_water).max().unwrap_or(0);
    kprintln!(
        "stacks: exception stack high-water: {} of {} bytes (deepest CPU)",
        deepest,
        arch::EXC_STACK_SIZE
    );
    kprintln!(
        "stacks: thread stack high-water: {} of {} bytes (deepest thread)",
        arch::thread_stack_high_water(),
        arch::STACK_SIZE
    );
    arch::exit(if ok { 0 } else { EXIT_FAILED })
}

/// Checks the core's invariants (all runqueue locks, IRQs masked like every core call).
fn check_invariants(tag: &str) -> bool {
    let r = sched::with_core(|k| k.check_invariants());
    match r {
        Ok(()) => {
            kprintln!("{}: scheduler invariants hold", tag);
            true
        }
        Err(v) => {
            defmt::error!("{}: FAIL scheduler invariant: {}", tag, defmt::Debug2Format(&v));
            false
        }
    }
}

/// sysbench's cpu test: count primes up to `max` by trial division.
fn count_primes(max: u32) -> u32 {
    let mut n = 0;
    for c in 3..=max {
        let mut l = 2;
        let mut prime = true;
        while l * l <= c {
            if c % l == 0 {
                prime = false;
                break;
            }
            l += 1;
        }
        if prime {
            n += 1;
        }
    }
    n
}

fn since_t0() -> u64 {
    arch::now_ns().saturating_sub(T0.load(Relaxed))
}

/// `scenario=affinity`: free spinners, and pinned ones: (CPU, count).
const AFF_FREE: u32 = 8;

/// `scenario=affinity`: events unless `events=` is given.
const AFF_EVENTS: u32 = 4000;

/// `scenario=nice`: the accepted deviation of the measured CPU-time ratio from the weight
/// ratio, in percent. The error comes from whole ticks (4 ms) of a 0.5 s window shared by 8
/// threads on one CPU, a few ticks per thread, and is larger under multi-threaded TCG; the
/// margin holds both modes.
const NICE_MARGIN_PCT: u64 = 15;

/// `scenario=nice`: events unless `events=` is given.
const NICE_EVENTS: u32 = 4000;
