//! Workloads chosen on the kernel command line (`/chosen/bootargs`, QEMU `-append`):
//!
//! * `scenario=boot`: every CPU online and ticking, an SGI to each CPU and back; exit 0.
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
//! Every scenario that finishes also runs the core's `check_invariants` before exiting.
//! Common keys: `hz=` (100, 250, 300, 1000), `nohz=on|off` (idle CPUs stop their tick;
//! default off), `features=` (comma-separated core feature
//! switches, `NO_` to turn one off). Anything unknown or malformed: one error line, exit 3.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering::*};

use sched_core::Features;

use crate::arch::{self, MAX_CPUS};
use crate::kprintln;
use crate::sched::{self, CPU};

/// Exit code for a bad command line.
pub const EXIT_BAD_ARGS: u32 = 3;
/// Exit code when the machine is not what the kernel needs (no DTB, no PSCI, ...).
pub const EXIT_MACHINE: u32 = 4;
/// Exit code when a scenario's check fails.
pub const EXIT_FAILED: u32 = 1;

/// Thread kinds (`sched::spawn`'s `kind`).
pub const KIND_MAIN: usize = 0;
/// A sysbench worker.
pub const KIND_SPINNER: usize = 1;
/// The thread that panics on purpose.
pub const KIND_PANIC: usize = 2;
/// The side of a pingpong pair that starts each round.
pub const KIND_PING: usize = 3;
/// The side of a pingpong pair that answers.
pub const KIND_PONG: usize = 4;
/// The thread that faults on purpose (arg: 0 udf, 1 stack overflow).
pub const KIND_FAULT: usize = 5;

/// Most events a sysbench run may ask for (one done-flag each).
pub const MAX_EVENTS: u32 = 65_536;
/// Most sysbench threads (the pool keeps one for the main thread).
pub const MAX_SPINNERS: u32 = 56;
/// Most pingpong pairs.
pub const MAX_PAIRS: u32 = 28;

/// What to run.
#[derive(Clone, Copy, Debug)]
pub enum Scenario {
    /// Bring-up check.
    Boot,
    /// sysbench-cpu-like run.
    Sysbench {
        /// Worker threads.
        threads: u32,
        /// Events in total.
        events: u32,
        /// Count primes up to this per event.
        maxprime: u32,
    },
    /// Pairs of threads waking each other in turn (block/wake through the core).
    Pingpong {
        /// Thread pairs.
        pairs: u32,
        /// Round trips per pair.
        rounds: u32,
    },
    /// Make a thread on `cpu` fault: an undefined instruction, or a stack overflow.
    Fault {
        /// Which fault.
        fault: Fault,
        /// The CPU.
        cpu: u32,
    },
    /// Panic on a CPU.
    Panic {
        /// The CPU.
        cpu: u32,
    },
}

/// The faults of `scenario=fault`.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// `udf`: the vectors report a synchronous exception.
    Udf,
    /// Recursion past the thread's 16 KiB stack: the canary check reports it.
    Stack,
}

/// The parsed command line.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// The workload.
    pub scenario: Scenario,
    /// Tick rate.
    pub hz: u32,
    /// Core feature switches.
    pub features: Features,
    /// Idle CPUs stop their tick.
    pub nohz: bool,
    /// Cluster size for the scheduler's topology (`clusters=K`); 0: one cluster of all CPUs,
    /// which is what Linux builds on QEMU virt. `clusters=4` on 8 CPUs gives the seed's 2×4.
    pub clusters: u32,
}

fn number(key: &str, v: &str, min: u32, max: u32) -> Result<u32, ArgError> {
    match v.parse::<u32>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(ArgError::Range { key: key_name(key), min, max }),
    }
}

fn key_name(key: &str) -> &'static str {
    ["threads", "events", "maxprime", "cpu", "hz", "pairs", "rounds", "seed", "clusters"]
        .into_iter()
        .find(|k| *k == key)
        .unwrap_or("?")
}

/// A command-line error.
#[derive(Clone, Copy, Debug)]
pub enum ArgError {
    /// `key=value` expected.
    NotKeyValue,
    /// A key this kernel does not know.
    UnknownKey,
    /// A scenario this kernel does not know.
    UnknownScenario,
    /// A number out of range or not a number.
    Range {
        /// Which key.
        key: &'static str,
        /// Smallest allowed.
        min: u32,
        /// Largest allowed.
        max: u32,
    },
    /// `hz=` not one of the supported rates.
    Hz,
    /// `features=` names a switch the core does not know.
    Feature,
    /// `nohz=` is not `on` or `off`.
    Nohz,
    /// `fault=` is not `udf` or `stack`.
    Fault,
}

impl core::fmt::Display for ArgError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ArgError::NotKeyValue => write!(f, "expected key=value"),
            ArgError::UnknownKey => {
                write!(
                    f,
                    "unknown key (known: scenario threads events maxprime seed barrier clusters pairs rounds cpu fault hz nohz features)"
                )
            }
            ArgError::UnknownScenario => {
                write!(f, "unknown scenario (known: boot sysbench pingpong panic fault)")
            }
            ArgError::Range { key, min, max } => write!(f, "{key} must be a number in {min}..={max}"),
            ArgError::Hz => write!(f, "hz must be one of {:?}", sched::HZ_CHOICES),
            ArgError::Feature => write!(f, "unknown feature switch in the features list"),
            ArgError::Nohz => write!(f, "nohz and barrier must be on or off"),
            ArgError::Fault => write!(f, "fault must be udf or stack"),
        }
    }
}

impl Config {
    /// Parses `bootargs`; `bad` receives the offending word on error.
    pub fn parse<'a>(bootargs: &'a str, bad: &mut &'a str) -> Result<Config, ArgError> {
        let mut scenario = "boot";
        let (mut threads, mut events, mut maxprime, mut cpu) = (8, 1000, 2000, 0);
        let (mut pairs, mut rounds) = (4, 1000);
        let mut hz = 250;
        let mut features = Features::DEFAULT;
        let mut nohz = false;
        let mut clusters = 0;
        let mut fault = Fault::Udf;
        for word in bootargs.split_ascii_whitespace() {
            *bad = word;
            let (k, v) = word.split_once('=').ok_or(ArgError::NotKeyValue)?;
            match k {
                "scenario" => scenario = v,
                "threads" => threads = number(k, v, 1, MAX_SPINNERS)?,
                "events" => events = number(k, v, 1, MAX_EVENTS)?,
                "maxprime" => maxprime = number(k, v, 3, 10_000_000)?,
                "seed" => SB_SEED.store(number(k, v, 0, u32::MAX)?, Relaxed),
                "clusters" => clusters = number(k, v, 0, MAX_CPUS as u32)?,
                "cpu" => cpu = number(k, v, 0, MAX_CPUS as u32 - 1)?,
                "pairs" => pairs = number(k, v, 1, MAX_PAIRS)?,
                "rounds" => rounds = number(k, v, 1, 1_000_000)?,
                "hz" => {
                    hz = number(k, v, 1, 10_000)?;
                    if !sched::HZ_CHOICES.contains(&hz) {
                        return Err(ArgError::Hz);
                    }
                }
                "fault" => {
                    fault = match v {
                        "udf" => Fault::Udf,
                        "stack" => Fault::Stack,
                        _ => return Err(ArgError::Fault),
                    }
                }
                "barrier" => {
                    SB_BARRIER.store(
                        match v {
                            "on" => true,
                            "off" => false,
                            _ => return Err(ArgError::Nohz),
                        },
                        Relaxed,
                    );
                }
                "nohz" => {
                    nohz = match v {
                        "on" => true,
                        "off" => false,
                        _ => return Err(ArgError::Nohz),
                    }
                }
                "features" => features = features.parse_list(v).map_err(|_| ArgError::Feature)?,
                _ => return Err(ArgError::UnknownKey),
            }
        }
        let scenario = match scenario {
            "boot" => Scenario::Boot,
            "sysbench" => Scenario::Sysbench { threads, events, maxprime },
            "panic" => Scenario::Panic { cpu },
            "pingpong" => Scenario::Pingpong { pairs, rounds },
            "fault" => Scenario::Fault { fault, cpu },
            other => {
                *bad = other;
                return Err(ArgError::UnknownScenario);
            }
        };
        *bad = "";
        Ok(Config { scenario, hz, features, nohz, clusters })
    }
}

static SCENARIO: spin::Once<Scenario> = spin::Once::new();
static NCPUS: AtomicU32 = AtomicU32::new(1);

/// Creates the scenario's main thread (on CPU 0, during boot, IRQs masked).
pub fn start(cfg: &Config, ncpus: usize) {
    SCENARIO.call_once(|| cfg.scenario);
    NCPUS.store(ncpus as u32, Relaxed);
    if let Scenario::Panic { cpu } | Scenario::Fault { cpu, .. } = cfg.scenario {
        if cpu as usize >= ncpus {
            defmt::error!("error: bad argument cpu={}: this machine has CPUs 0..{}", cpu, ncpus - 1);
            arch::exit(EXIT_BAD_ARGS);
        }
    }
    if let Err(e) = sched::spawn(0, arch::now_ns(), KIND_MAIN, 0, 0, u64::MAX) {
        defmt::error!("error: cannot create the main thread: {}", defmt::Debug2Format(&e));
        arch::exit(EXIT_MACHINE);
    }
}

/// Entry of every kernel thread.
pub fn thread_main(kind: usize, arg: usize) {
    match kind {
        KIND_MAIN => match SCENARIO.get() {
            Some(Scenario::Boot) => boot(),
            Some(&Scenario::Sysbench { threads, events, maxprime }) => {
                sysbench_main(threads, events, maxprime)
            }
            Some(&Scenario::Panic { cpu }) => pinned_main(KIND_PANIC, cpu as usize, cpu),
            Some(&Scenario::Fault { fault, cpu }) => pinned_main(KIND_FAULT, fault as usize, cpu),
            Some(&Scenario::Pingpong { pairs, rounds }) => pingpong_main(pairs, rounds),
            None => {}
        },
        KIND_SPINNER => spinner(arg),
        KIND_PING => ping(arg),
        KIND_FAULT => fault(arg),
        KIND_PONG => pong(arg),
        KIND_PANIC => panic!(
            "scenario=panic: requested panic (thread pinned to CPU {}, on CPU {})",
            arg,
            arch::cpu_id()
        ),
        _ => {}
    }
}

/// Creates a thread of `kind` pinned to `cpu`.
fn pinned_main(kind: usize, arg: usize, cpu: u32) {
    if arch::sys_spawn(kind, arg, 0, 1 << cpu) < 0 {
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
    } else {
        core::hint::black_box(deep(40));
    }
    // Still here: the stack check runs when this thread leaves the CPU.
}

/// Uses about 512 bytes of stack per level.
fn deep(n: u32) -> u64 {
    let mut buf = [0u8; 512];
    core::hint::black_box(&mut buf);
    if n == 0 {
        return buf[0] as u64;
    }
    deep(n - 1) + core::hint::black_box(buf[7]) as u64
}

fn ncpus() -> usize {
    NCPUS.load(Relaxed) as usize
}

fn wait_until(deadline_ns: u64, cond: impl Fn() -> bool) -> bool {
    loop {
        if cond() {
            return true;
        }
        if arch::now_ns() > deadline_ns {
            return false;
        }
        arch::relax();
    }
}

// ---- boot ---------------------------------------------------------------------------------

fn boot() {
    let n = ncpus();
    let start = arch::now_ns();
    if !wait_until(start + 2_000_000_000, || sched::ONLINE.load(Acquire) >= n) {
        defmt::error!("boot: FAIL only {} of {} CPUs online after 2 s", sched::ONLINE.load(Acquire), n);
        arch::exit(EXIT_FAILED);
    }
    let all_online = (0..n).map(|c| CPU[c].online_ns.load(Relaxed)).max().unwrap_or(0);
    kprintln!("boot: all {} CPUs online, the last at {} us", n, all_online / 1000);
    let t = arch::now_ns();
    let base: [u64; MAX_CPUS] = core::array::from_fn(|c| CPU[c].ticks.load(Relaxed));
    if sched::nohz() {
        kprintln!("boot: nohz=on, idle CPUs do not tick: tick check skipped");
    } else if !wait_until(t + 2_000_000_000, || (0..n).all(|c| CPU[c].ticks.load(Relaxed) >= base[c] + 3)) {
        for (c, cc) in CPU.iter().enumerate().take(n) {
            kprintln!("boot: cpu {} ticks {}", c, cc.ticks.load(Relaxed));
        }
        defmt::error!("boot: FAIL not every CPU ticked 3 times within 2 s");
        arch::exit(EXIT_FAILED);
    } else {
        kprintln!(
            "boot: every CPU ticks (hz={}), 3 ticks each after {} us",
            sched::hz(),
            (arch::now_ns() - t) / 1000
        );
    }
    for (c, cc) in CPU.iter().enumerate().take(n) {
        let before = sched::PONGS.load(Acquire);
        let t = arch::now_ns();
        sched::send_sgi(sched::SGI_PING, c);
        if !wait_until(t + 1_000_000_000, || sched::PONGS.load(Acquire) > before) {
            defmt::error!("boot: FAIL no answer to the SGI sent to CPU {}", c);
            arch::exit(EXIT_FAILED);
        }
        let rtt = arch::now_ns() - t;
        kprintln!(
            "boot: cpu {} online at {} us, pings received {}, SGI round trip {} us",
            c,
            cc.online_ns.load(Relaxed) / 1000,
            cc.pings.load(Relaxed),
            rtt / 1000
        );
    }
    if !check_invariants("boot") {
        arch::exit(EXIT_FAILED);
    }
    kprintln!("boot: OK ({} CPUs, boot to all online {} us)", n, all_online / 1000);
    arch::exit(0);
}

// ---- sysbench -----------------------------------------------------------------------------

static SB_THREADS: AtomicU32 = AtomicU32::new(0);
static SB_EVENTS: AtomicU32 = AtomicU32::new(0);
static SB_MAXPRIME: AtomicU32 = AtomicU32::new(0);
/// Workload jitter seed (`seed=`): with a non-zero seed each sysbench thread first does a
/// seed-dependent amount of warm-up work (0..7 events' worth, before the start barrier), so deterministic runs differ per seed the way real
/// thread start times do. 0: no warm-up.
static SB_SEED: AtomicU32 = AtomicU32::new(0);

/// SplitMix64 step, for the warm-up amounts.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
static SB_PRIMES: AtomicU32 = AtomicU32::new(0);
static NEXT_EVENT: AtomicU32 = AtomicU32::new(0);
/// sysbench starts its threads together: each waits at a start barrier until all have
/// arrived (`barrier=on`, the default). Threads that block right after creation leave their
/// CPU idle again, which is what lets fork placement stack them (spec §5).
static SB_BARRIER: AtomicBool = AtomicBool::new(true);
static SB_SLOTS: [AtomicU32; MAX_SPINNERS as usize] =
    [const { AtomicU32::new(u32::MAX) }; MAX_SPINNERS as usize];
static SB_SLOTS_READY: AtomicBool = AtomicBool::new(false);
static SB_ARRIVED: AtomicU32 = AtomicU32::new(0);
static SB_OPEN: AtomicBool = AtomicBool::new(false);

/// The start barrier: the last thread to arrive wakes the others.
fn start_barrier() {
    let threads = SB_THREADS.load(Relaxed);
    if SB_ARRIVED.fetch_add(1, AcqRel) + 1 == threads {
        while !SB_SLOTS_READY.load(Acquire) {
            arch::relax();
        }
        SB_OPEN.store(true, Release);
        for s in SB_SLOTS.iter().take(threads as usize) {
            arch::sys_unpark(s.load(Relaxed) as usize);
        }
    } else {
        while !SB_OPEN.load(Acquire) {
            arch::sys_park();
        }
    }
}
static EVENT_DONE: [AtomicU8; MAX_EVENTS as usize] = [const { AtomicU8::new(0) }; MAX_EVENTS as usize];
static THREAD_EVENTS: [AtomicU32; MAX_SPINNERS as usize] =
    [const { AtomicU32::new(0) }; MAX_SPINNERS as usize];
static THREAD_END: [AtomicU64; MAX_SPINNERS as usize] = [const { AtomicU64::new(0) }; MAX_SPINNERS as usize];
static BAD_RESULTS: AtomicU32 = AtomicU32::new(0);
static LAT_MIN: AtomicU64 = AtomicU64::new(u64::MAX);
static LAT_MAX: AtomicU64 = AtomicU64::new(0);
static LAT_SUM: AtomicU64 = AtomicU64::new(0);
/// Latency histogram: bucket i counts events of [2^i, 2^(i+1)) µs (bucket 0 also < 1 µs).
static LAT_HIST: [AtomicU32; 24] = [const { AtomicU32::new(0) }; 24];
static FINISHED: AtomicU32 = AtomicU32::new(0);
static ACTIVE: AtomicBool = AtomicBool::new(false);
static T0: AtomicU64 = AtomicU64::new(0);
static FIRST_SPINNER: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static RUNS_SPINNER: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
static SPREAD: AtomicU64 = AtomicU64::new(0);
static SPREAD_MIGRATIONS: AtomicU64 = AtomicU64::new(0);
static MIGRATIONS_AT_T0: AtomicU64 = AtomicU64::new(0);

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
    let m = &sched::MIGRATIONS_BY_REASON;
    kprintln!(
        "{}: migrations {} (wakeup {}, placement {}, balance {}, active balance {}, affinity {})",
        tag,
        sched::MIGRATIONS.load(Relaxed),
        m[0].load(Relaxed),
        m[1].load(Relaxed),
        m[2].load(Relaxed),
        m[3].load(Relaxed),
        m[4].load(Relaxed)
    );
    for (c, cc) in CPU.iter().enumerate().take(n) {
        kprintln!(
            "{}: cpu {} ticks {} switches {} migrations-in {} balance runs {} moved {} resched SGIs sent {} received {}",
            tag,
            c,
            cc.ticks.load(Relaxed),
            cc.switches.load(Relaxed),
            cc.migrations_in.load(Relaxed),
            cc.balance_runs.load(Relaxed),
            cc.balance_moved.load(Relaxed),
            cc.resched_sent.load(Relaxed),
            cc.resched_sgis.load(Relaxed)
        );
        kprintln!(
            "{}: cpu {} time in handlers {} us, longest {} us",
            tag,
            c,
            cc.handler_ns.load(Relaxed) / 1000,
            cc.handler_max_ns.load(Relaxed) / 1000
        );
        let o = &cc.balance_outcomes;
        kprintln!(
            "{}: cpu {} balance outcomes: not designated {} balanced {} moved {} nothing detachable {} all pinned {} active balance {}",
            tag,
            c,
            o[0].load(Relaxed),
            o[1].load(Relaxed),
            o[2].load(Relaxed),
            o[3].load(Relaxed),
            o[4].load(Relaxed),
            o[5].load(Relaxed)
        );
    }
}

/// Checks the core's invariants (all runqueue locks, IRQs masked like every core call).
fn check_invariants(tag: &str) -> bool {
    let r = {
        let _irq = arch::IrqGuard::mask();
        sched::smp().check_invariants()
    };
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

fn sysbench_main(threads: u32, events: u32, maxprime: u32) {
    SB_THREADS.store(threads, Relaxed);
    SB_EVENTS.store(events, Relaxed);
    SB_MAXPRIME.store(maxprime, Relaxed);
    SB_PRIMES.store(count_primes(maxprime), Relaxed);
    kprintln!(
        "sysbench: {} threads, {} events, maxprime {} ({} primes per event), {} CPUs, hz={}, features {}",
        threads,
        events,
        maxprime,
        SB_PRIMES.load(Relaxed),
        ncpus(),
        sched::hz(),
        defmt::Debug2Format(&sched::smp().features())
    );
    MIGRATIONS_AT_T0.store(sched::MIGRATIONS.load(Relaxed), Relaxed);
    T0.store(arch::now_ns(), Release);
    ACTIVE.store(true, Release);
    for i in 0..threads {
        let slot = arch::sys_spawn(KIND_SPINNER, i as usize, 0, u64::MAX);
        if slot < 0 {
            defmt::error!("sysbench: FAIL cannot create thread {}", i);
            arch::exit(EXIT_FAILED);
        }
        SB_SLOTS[i as usize].store(slot as u32, Relaxed);
    }
    SB_SLOTS_READY.store(true, Release);
}

fn spinner(i: usize) {
    let events = SB_EVENTS.load(Relaxed);
    let maxprime = SB_MAXPRIME.load(Relaxed);
    let primes = SB_PRIMES.load(Relaxed);
    let seed = SB_SEED.load(Relaxed);
    if seed != 0 {
        // Start offset: 0..7 events of work before the thread reaches the barrier,
        // as real threads start at different times.
        for _ in 0..mix(seed as u64 ^ (i as u64) << 32) % 8 {
            core::hint::black_box(count_primes(maxprime));
        }
    }
    if SB_BARRIER.load(Relaxed) {
        start_barrier();
    }
    loop {
        let e = NEXT_EVENT.fetch_add(1, Relaxed);
        if e >= events {
            break;
        }
        let t = arch::now_ns();
        if count_primes(maxprime) != primes {
            BAD_RESULTS.fetch_add(1, Relaxed);
        }
        let lat = arch::now_ns() - t;
        EVENT_DONE[e as usize].fetch_add(1, Relaxed);
        THREAD_EVENTS[i].fetch_add(1, Relaxed);
        record_latency(lat);
    }
    THREAD_END[i].store(arch::now_ns() - T0.load(Relaxed), Relaxed);
    if FINISHED.fetch_add(1, AcqRel) + 1 == SB_THREADS.load(Relaxed) {
        sysbench_report();
    }
}

fn sysbench_report() -> ! {
    let n = ncpus();
    let threads = SB_THREADS.load(Relaxed) as usize;
    let events = SB_EVENTS.load(Relaxed);
    let total = arch::now_ns() - T0.load(Relaxed);
    let mut ok = true;
    let (mut missing, mut duplicated) = (0u32, 0u32);
    for d in EVENT_DONE.iter().take(events as usize) {
        match d.load(Relaxed) {
            0 => missing += 1,
            1 => {}
            _ => duplicated += 1,
        }
    }
    let extra = EVENT_DONE.iter().skip(events as usize).filter(|d| d.load(Relaxed) != 0).count();
    let sum: u32 = THREAD_EVENTS.iter().take(threads).map(|t| t.load(Relaxed)).sum();
    let bad = BAD_RESULTS.load(Relaxed);
    if missing != 0 || duplicated != 0 || extra != 0 || sum != events || bad != 0 {
        ok = false;
    }
    ok &= check_invariants("sysbench");
    kprintln!("sysbench: total time {} us for {} events", total / 1000, events);
    report_latency("sysbench", "event", events);
    for i in 0..threads {
        kprintln!(
            "sysbench: thread {} did {} events, finished at {} us",
            i,
            THREAD_EVENTS[i].load(Relaxed),
            THREAD_END[i].load(Relaxed) / 1000
        );
    }
    kprintln!(
        "sysbench: exactly-once check: {} events, {} missing, {} done twice or more, {} beyond the range, thread sum {}, wrong results {} -> {}",
        events,
        missing,
        duplicated,
        extra,
        sum,
        bad,
        if ok { "OK" } else { "FAIL" }
    );
    let spread_goal = if threads < n {
        "each of as many CPUs as threads runs exactly one spinner"
    } else if threads == n {
        "every CPU runs exactly one spinner"
    } else {
        "every CPU runs a spinner"
    };
    match SPREAD.load(Acquire) {
        0 => kprintln!("sysbench: spread never reached ({})", spread_goal),
        s => kprintln!(
            "sysbench: spread time {} us (first spinner created -> {}), {} migrations before it",
            s / 1000,
            spread_goal,
            SPREAD_MIGRATIONS.load(Relaxed)
        ),
    }
    for (c, f) in FIRST_SPINNER.iter().enumerate().take(n) {
        let f = f.load(Relaxed);
        kprintln!("sysbench: cpu {} first spinner at {} us", c, if f == 0 { -1 } else { (f / 1000) as i64 });
    }
    report_cpus("sysbench", n);
    kprintln!("sysbench: {}", if ok { "OK" } else { "FAIL" });
    arch::exit(if ok { 0 } else { EXIT_FAILED })
}

fn check_spread(now: u64) {
    let threads = SB_THREADS.load(Relaxed);
    if SPREAD.load(Relaxed) != 0 {
        return;
    }
    let n = ncpus();
    let want = (threads as usize).min(n);
    let lone = threads as usize <= n;
    let running =
        (0..n).filter(|&c| RUNS_SPINNER[c].load(Relaxed) && (!lone || sched::nr_running(c) == 1)).count();
    if running >= want {
        let s = now.saturating_sub(T0.load(Relaxed)).max(1);
        if SPREAD.compare_exchange(0, s, AcqRel, Relaxed).is_ok() {
            let m = sched::MIGRATIONS.load(Relaxed) - MIGRATIONS_AT_T0.load(Relaxed);
            SPREAD_MIGRATIONS.store(m, Relaxed);
        }
    }
}

/// After every switch on `cpu` (handler context).
pub fn on_switch(cpu: usize, now: u64, kind: Option<usize>) {
    if !ACTIVE.load(Acquire) {
        return;
    }
    let spinner = kind == Some(KIND_SPINNER);
    RUNS_SPINNER[cpu].store(spinner, Relaxed);
    if spinner && FIRST_SPINNER[cpu].load(Relaxed) == 0 {
        FIRST_SPINNER[cpu].store(now.saturating_sub(T0.load(Relaxed)).max(1), Relaxed);
    }
    check_spread(now);
}

/// On every tick of `cpu` (handler context).
pub fn on_tick(cpu: usize, now: u64) {
    let _ = cpu;
    if ACTIVE.load(Acquire) {
        check_spread(now);
    }
}

// ---- pingpong -----------------------------------------------------------------------------

static PP_PAIRS: AtomicU32 = AtomicU32::new(0);
static PP_ROUNDS: AtomicU32 = AtomicU32::new(0);
static PP_READY: AtomicBool = AtomicBool::new(false);
static PP_SLOT: [[AtomicU32; 2]; MAX_PAIRS as usize] =
    [const { [AtomicU32::new(0), AtomicU32::new(0)] }; MAX_PAIRS as usize];
static PP_COUNT: [[AtomicU32; 2]; MAX_PAIRS as usize] =
    [const { [AtomicU32::new(0), AtomicU32::new(0)] }; MAX_PAIRS as usize];
static PP_FINISHED: AtomicU32 = AtomicU32::new(0);

fn pingpong_main(pairs: u32, rounds: u32) {
    PP_PAIRS.store(pairs, Relaxed);
    PP_ROUNDS.store(rounds, Relaxed);
    kprintln!("pingpong: {} pairs, {} round trips each, {} CPUs, hz={}", pairs, rounds, ncpus(), sched::hz());
    T0.store(arch::now_ns(), Release);
    for (i, slots) in PP_SLOT.iter().enumerate().take(pairs as usize) {
        for (side, kind) in [KIND_PING, KIND_PONG].into_iter().enumerate() {
            let slot = arch::sys_spawn(kind, i, 0, u64::MAX);
            if slot < 0 {
                defmt::error!("pingpong: FAIL cannot create thread {} of pair {}", side, i);
                arch::exit(EXIT_FAILED);
            }
            slots[side].store(slot as u32, Relaxed);
        }
    }
    PP_READY.store(true, Release);
}

fn wait_ready() {
    while !PP_READY.load(Acquire) {
        arch::relax();
    }
}

/// Starts every round: wakes its partner, then blocks until woken back.
fn ping(i: usize) {
    wait_ready();
    let partner = PP_SLOT[i][1].load(Relaxed) as usize;
    for _ in 0..PP_ROUNDS.load(Relaxed) {
        let t = arch::now_ns();
        if !arch::sys_unpark(partner) {
            defmt::error!("pingpong: FAIL pair {} lost its partner", i);
            arch::exit(EXIT_FAILED);
        }
        arch::sys_park();
        record_latency(arch::now_ns() - t);
        PP_COUNT[i][0].fetch_add(1, Relaxed);
    }
    pingpong_finished();
}

/// Answers every round: blocks until woken, then wakes its partner.
fn pong(i: usize) {
    wait_ready();
    let partner = PP_SLOT[i][0].load(Relaxed) as usize;
    for _ in 0..PP_ROUNDS.load(Relaxed) {
        arch::sys_park();
        PP_COUNT[i][1].fetch_add(1, Relaxed);
        if !arch::sys_unpark(partner) {
            defmt::error!("pingpong: FAIL pair {} lost its partner", i);
            arch::exit(EXIT_FAILED);
        }
    }
    pingpong_finished();
}

fn pingpong_finished() {
    let pairs = PP_PAIRS.load(Relaxed);
    if PP_FINISHED.fetch_add(1, AcqRel) + 1 < 2 * pairs {
        return;
    }
    let total = arch::now_ns() - T0.load(Relaxed);
    let rounds = PP_ROUNDS.load(Relaxed);
    let mut ok = true;
    for (i, c) in PP_COUNT.iter().enumerate().take(pairs as usize) {
        let (a, b) = (c[0].load(Relaxed), c[1].load(Relaxed));
        if a != rounds || b != rounds {
            defmt::error!("pingpong: FAIL pair {}: {} pings, {} pongs, expected {}", i, a, b, rounds);
            ok = false;
        }
    }
    kprintln!("pingpong: {} round trips in {} us", pairs * rounds, total / 1000);
    report_latency("pingpong", "round trip", pairs * rounds);
    ok &= check_invariants("pingpong");
    report_cpus("pingpong", ncpus());
    kprintln!("pingpong: {}", if ok { "OK" } else { "FAIL" });
    arch::exit(if ok { 0 } else { EXIT_FAILED })
}
