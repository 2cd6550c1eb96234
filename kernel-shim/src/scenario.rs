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
//! * `scenario=wakeone threads=N events=M`: sysbench workers created pinned to CPU 0, then
//!   widened to all CPUs: only the load balancer spreads them; spread time, exactly-once.
//! * `scenario=affinity`: 4 threads pinned to CPU 1, 2 to CPU 6, 8 free; no thread may be
//!   switched in outside its affinity, and every CPU must run a scenario thread.
//! * `scenario=nice threads=N nice=K events=M`: half the threads at nice 0, half at nice K,
//!   all on one CPU; their CPU-time ratio must be within `NICE_MARGIN_PCT` (15 %) of the weight ratio.
//! * `scenario=churn ops=N seed=S`: random spawn/exit/park/unpark/yield/sleep until N
//!   operations; every thread must start and exit exactly once.
//! * `scenario=hang cpu=C`: a thread on CPU C spins with IRQs masked; the watchdog exits 5.
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
/// A spinner pinned to one CPU (`scenario=affinity`); works like a sysbench worker.
pub const KIND_PINNED: usize = 6;
/// A churn thread (arg: its serial number).
pub const KIND_CHURN: usize = 7;
/// The thread that masks IRQs and spins forever (`scenario=hang`).
pub const KIND_HANG: usize = 8;
/// A thread that keeps its CPU busy (and ticking) with yields (`scenario=hang`).
pub const KIND_BUSY: usize = 9;
/// A thread that calls the core from thread context in a loop (`scenario=corecalls`; arg:
/// rounds).
pub const KIND_CORECALLS: usize = 10;

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
    /// sysbench workers all created on CPU 0 (pinned there, then widened): only the load
    /// balancer spreads them.
    Wakeone {
        /// Worker threads.
        threads: u32,
        /// Events in total.
        events: u32,
        /// Count primes up to this per event.
        maxprime: u32,
    },
    /// Pinned spinners (4 on CPU 1, 2 on CPU 6) and 8 free ones sharing the events.
    Affinity {
        /// Events in total.
        events: u32,
        /// Count primes up to this per event.
        maxprime: u32,
    },
    /// Two groups of spinners (nice 0 and nice `nice`) on one CPU; CPU-time ratio.
    Nice {
        /// Threads in all (half at nice 0).
        threads: u32,
        /// Nice value of the second group.
        nice: u32,
        /// Events in total.
        events: u32,
        /// Count primes up to this per event.
        maxprime: u32,
    },
    /// Threads that spawn, exit, park/unpark, yield and sleep at random.
    Churn {
        /// Operations to do before stopping.
        ops: u32,
    },
    /// A thread on `cpu` spins with IRQs masked; the watchdog must exit 5.
    Hang {
        /// The CPU.
        cpu: u32,
    },
    /// One thread per CPU calls the core from thread context `rounds` times while ticks
    /// arrive: every call must come back (the calls mask IRQs; without that, a tick taking
    /// the lock the thread holds spins forever).
    Corecalls {
        /// Calls per thread.
        rounds: u32,
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
    /// CPUs' ticks are staggered over the period (`skew=on`, the default); see `sched::set_skew`.
    pub skew: bool,
}

/// An `on`/`off` switch.
fn on_off(v: &str) -> Result<bool, ArgError> {
    match v {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(ArgError::OnOff),
    }
}

fn number(key: &str, v: &str, min: u32, max: u32) -> Result<u32, ArgError> {
    match v.parse::<u32>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(ArgError::Range { key: key_name(key), min, max }),
    }
}

fn key_name(key: &str) -> &'static str {
    [
        "threads", "events", "maxprime", "cpu", "hz", "pairs", "rounds", "seed", "clusters", "nice", "ops",
        "watchdog",
    ]
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
    /// A switch (`nohz`, `skew`, `idle_yield`, `barrier`, `trace`) is not `on` or `off`.
    OnOff,
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
                    "unknown key (known: scenario threads events maxprime seed barrier clusters pairs rounds cpu fault nice ops watchdog hz nohz skew idle_yield features trace)"
                )
            }
            ArgError::UnknownScenario => {
                write!(f, "unknown scenario (known: boot sysbench pingpong panic fault wakeone affinity nice churn hang corecalls)")
            }
            ArgError::Range { key, min, max } => write!(f, "{key} must be a number in {min}..={max}"),
            ArgError::Hz => write!(f, "hz must be one of {:?}", sched::HZ_CHOICES),
            ArgError::Feature => write!(f, "unknown feature switch in the features list"),
            ArgError::OnOff => write!(f, "nohz, skew, idle_yield, barrier and trace must be on or off"),
            ArgError::Fault => write!(f, "fault must be udf or stack"),
        }
    }
}

impl Config {
    /// Parses `bootargs`; `bad` receives the offending word on error.
    pub fn parse<'a>(bootargs: &'a str, bad: &mut &'a str) -> Result<Config, ArgError> {
        let mut scenario = "boot";
        let (mut threads, mut events, mut maxprime, mut cpu) = (8, 1000, 2000, 0);
        let mut events_set = false;
        let (mut pairs, mut rounds) = (4, 1000);
        let mut hz = sched::DEFAULT_HZ;
        let mut features = Features::DEFAULT;
        let mut nohz = false;
        let mut skew = true;
        let mut clusters = 0;
        let mut fault = Fault::Udf;
        let (mut nice, mut ops) = (5, 10_000);
        for word in bootargs.split_ascii_whitespace() {
            *bad = word;
            let (k, v) = word.split_once('=').ok_or(ArgError::NotKeyValue)?;
            match k {
                "scenario" => scenario = v,
                "threads" => threads = number(k, v, 1, MAX_SPINNERS)?,
                "events" => {
                    events = number(k, v, 1, MAX_EVENTS)?;
                    events_set = true;
                }
                "maxprime" => maxprime = number(k, v, 3, 10_000_000)?,
                "seed" => SB_SEED.store(number(k, v, 0, u32::MAX)?, Relaxed),
                "clusters" => clusters = number(k, v, 0, MAX_CPUS as u32)?,
                "cpu" => cpu = number(k, v, 0, MAX_CPUS as u32 - 1)?,
                "pairs" => pairs = number(k, v, 1, MAX_PAIRS)?,
                "rounds" => rounds = number(k, v, 1, 1_000_000)?,
                "nice" => nice = number(k, v, 1, 19)?,
                "ops" => ops = number(k, v, 1, 1_000_000)?,
                "watchdog" => sched::set_watchdog_ticks(number(k, v, 0, sched::MAX_WATCHDOG_TICKS)?),
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
                "trace" => sched::set_trace(on_off(v)?),
                "barrier" => SB_BARRIER.store(on_off(v)?, Relaxed),
                "nohz" => nohz = on_off(v)?,
                "idle_yield" => sched::set_idle_exit_yield(on_off(v)?),
                "skew" => skew = on_off(v)?,
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
            "wakeone" => Scenario::Wakeone { threads, events, maxprime },
            "affinity" => {
                // Long enough for the balancer to act (about 0.2 s on 8 CPUs).
                let events = if events_set { events } else { AFF_EVENTS };
                Scenario::Affinity { events, maxprime }
            }
            "nice" => {
                if threads < 2 {
                    *bad = "threads";
                    return Err(ArgError::Range { key: "threads", min: 2, max: MAX_SPINNERS });
                }
                // Long enough for many scheduling periods (about 0.5 s on one CPU).
                let events = if events_set { events } else { NICE_EVENTS };
                Scenario::Nice { threads, nice, events, maxprime }
            }
            "churn" => Scenario::Churn { ops },
            "hang" => Scenario::Hang { cpu },
            "corecalls" => Scenario::Corecalls { rounds },
            other => {
                *bad = other;
                return Err(ArgError::UnknownScenario);
            }
        };
        *bad = "";
        Ok(Config { scenario, hz, features, nohz, clusters, skew })
    }
}

static SCENARIO: spin::Once<Scenario> = spin::Once::new();
static NCPUS: AtomicU32 = AtomicU32::new(1);

/// Creates the scenario's main thread (on CPU 0, during boot, IRQs masked).
pub fn start(cfg: &Config, ncpus: usize) {
    sched::set_hooks(sched::Hooks { thread_main, on_tick, on_switch });
    SCENARIO.call_once(|| cfg.scenario);
    NCPUS.store(ncpus as u32, Relaxed);
    if let Scenario::Panic { cpu } | Scenario::Fault { cpu, .. } | Scenario::Hang { cpu } = cfg.scenario {
        if cpu as usize >= ncpus {
            defmt::error!("error: bad argument cpu={}: this machine has CPUs 0..{}", cpu, ncpus - 1);
            arch::exit(EXIT_BAD_ARGS);
        }
    }
    if matches!(cfg.scenario, Scenario::Hang { .. }) && ncpus < 2 {
        defmt::error!("error: bad argument scenario=hang: needs 2 CPUs (one hangs, one watches)");
        arch::exit(EXIT_BAD_ARGS);
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
            Some(&Scenario::Panic { cpu }) => pinned_main(KIND_PANIC, cpu as usize, cpu),
            Some(&Scenario::Fault { fault, cpu }) => pinned_main(KIND_FAULT, fault as usize, cpu),
            Some(&Scenario::Pingpong { pairs, rounds }) => pingpong_main(pairs, rounds),
            None => {}
        },
        KIND_SPINNER | KIND_PINNED => spinner(arg),
        KIND_CHURN => churn_child(arg),
        KIND_HANG => hang(),
        KIND_BUSY => loop {
            arch::sys_yield();
        },
        KIND_CORECALLS => corecalls(arg),
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

// ---- boot ---------------------------------------------------------------------------------

fn boot() {
    // kmain starts scenarios only once every CPU is online.
    let n = ncpus();
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
/// Workload jitter seed (`seed=`): with a non-zero seed each sysbench thread starts with a
/// seed-dependent offset of busy work (0..7 × 16 µs, before the start barrier), so
/// deterministic runs differ per seed the way real thread start times do. 0: no offset.
static SB_SEED: AtomicU32 = AtomicU32::new(0);

/// Unit of the seed's thread start offsets.
const START_OFFSET_UNIT_NS: u64 = 16_000;
/// A small piece of work (about 1 µs) for the start offsets' busy wait.
const START_OFFSET_PRIMES: u32 = 60;

/// SplitMix64 step, for the start offsets.
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
/// CPU idle again, which is what lets fork placement stack them (docs/linux-v5.7.md §5).
static SB_BARRIER: AtomicBool = AtomicBool::new(true);
static SB_SLOTS: [AtomicU32; MAX_SPINNERS as usize] =
    [const { AtomicU32::new(u32::MAX) }; MAX_SPINNERS as usize];
static SB_SLOTS_READY: AtomicBool = AtomicBool::new(false);
static SB_ARRIVED: AtomicU32 = AtomicU32::new(0);
static SB_OPEN: AtomicBool = AtomicBool::new(false);

/// The main thread's slot, so the barrier can wake it.
static SB_MAIN_SLOT: AtomicU32 = AtomicU32::new(u32::MAX);

/// The start barrier: the workers and the main thread wait at it, as in sysbench (whose
/// start barrier counts the workers plus the main thread); the last to arrive wakes the
/// others. The main thread arrives after creating every worker, so the slots are known.
fn start_barrier() {
    let parties = SB_THREADS.load(Relaxed) + 1;
    if SB_ARRIVED.fetch_add(1, AcqRel) + 1 == parties {
        while !SB_SLOTS_READY.load(Acquire) {
            arch::relax();
        }
        if mode() == Mode::Nice {
            NICE_START_AT.store(since_t0(), Relaxed);
            snapshot_cpu_times(&NICE_START);
        }
        SB_OPEN.store(true, Release);
        let main = SB_MAIN_SLOT.load(Relaxed);
        for s in SB_SLOTS.iter().take(parties as usize - 1).map(|s| s.load(Relaxed)).chain([main]) {
            arch::sys_unpark(s as usize);
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
/// Runqueue lengths when half the events were taken.
static HALF_NR: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];
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
        kprintln!(
            "{}: cpu {} nohz: tickless (core {}, kernel {}), pending kick {}, next balance jiffy {}, now jiffy {}",
            tag,
            c,
            sched::with_core(|k| k.smp().nohz().is_tickless(c)),
            sched::is_tickless(c),
            sched::with_core(|k| k.smp().nohz().kick_flags(c)),
            sched::with_core(|k| k.smp().balance_state(c)).map_or(0, |b| b.next_balance),
            arch::now_ns() / (1_000_000_000 / sched::hz() as u64)
        );
        let o = &cc.balance_outcomes;
        kprintln!(
            "{}: cpu {} balance outcomes: not designated {} balanced {} moved {} nothing detachable {} all pinned {} active balance {} (rounds: redirected {} retried {})",
            tag,
            c,
            o[0].load(Relaxed),
            o[1].load(Relaxed),
            o[2].load(Relaxed),
            o[3].load(Relaxed),
            o[4].load(Relaxed),
            o[5].load(Relaxed),
            o[6].load(Relaxed),
            o[7].load(Relaxed)
        );
    }
    let deepest = (0..n).map(arch::exc_stack_high_water).max().unwrap_or(0);
    kprintln!(
        "{}: exception stack high-water: {} of {} bytes (deepest CPU)",
        tag,
        deepest,
        arch::EXC_STACK_SIZE
    );
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

/// The scenarios built on the sysbench workers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Sysbench = 0,
    Wakeone = 1,
    Affinity = 2,
    Nice = 3,
}

static MODE: AtomicU8 = AtomicU8::new(0);

fn mode() -> Mode {
    match MODE.load(Relaxed) {
        1 => Mode::Wakeone,
        2 => Mode::Affinity,
        3 => Mode::Nice,
        _ => Mode::Sysbench,
    }
}

fn tag() -> &'static str {
    match mode() {
        Mode::Sysbench => "sysbench",
        Mode::Wakeone => "wakeone",
        Mode::Affinity => "affinity",
        Mode::Nice => "nice",
    }
}

/// `scenario=affinity`: free spinners, and pinned ones: (CPU, count).
const AFF_FREE: u32 = 8;
const AFF_PINNED: [(usize, u32); 2] = [(1, 4), (6, 2)];
/// `scenario=affinity`: events unless `events=` is given.
const AFF_EVENTS: u32 = 4000;
/// `scenario=nice`: the accepted deviation of the measured CPU-time ratio from the weight
/// ratio, in percent. Measured: nice 5 off by 8 % and nice 10 by 2 % in deterministic mode,
/// 2–12 % under multi-threaded TCG; the error comes from whole ticks (4 ms) of a 0.5 s
/// window shared by 8 threads on one CPU.
const NICE_MARGIN_PCT: u64 = 15;
/// `scenario=nice`: events unless `events=` is given.
const NICE_EVENTS: u32 = 4000;
static NICE_LEVEL: AtomicU32 = AtomicU32::new(0);
static NICE_CPU: AtomicU32 = AtomicU32::new(0);
/// Each thread's CPU time when the first thread found the events used up (the end of the
/// window in which all threads compete).
static END_CPU: [AtomicU64; MAX_SPINNERS as usize] = [const { AtomicU64::new(0) }; MAX_SPINNERS as usize];
static END_SNAPPED: AtomicBool = AtomicBool::new(false);
/// Each thread's CPU time when half the events were taken (start of the steady-state
/// window, which ends at the `END_CPU` snapshot).
static HALF_CPU: [AtomicU64; MAX_SPINNERS as usize] = [const { AtomicU64::new(0) }; MAX_SPINNERS as usize];
static HALF_AT: AtomicU64 = AtomicU64::new(0);
/// Each thread's CPU time when the start barrier opened (the start of the window).
static NICE_START: [AtomicU64; MAX_SPINNERS as usize] = [const { AtomicU64::new(0) }; MAX_SPINNERS as usize];
static NICE_START_AT: AtomicU64 = AtomicU64::new(0);

/// Each worker's CPU time now, into `into`.
fn snapshot_cpu_times(into: &[AtomicU64]) {
    for (t, snap) in into.iter().enumerate().take(SB_THREADS.load(Relaxed) as usize) {
        snap.store(sched::thread_cpu_ns_now(SB_SLOTS[t].load(Relaxed) as usize), Relaxed);
    }
}
static END_AT: AtomicU64 = AtomicU64::new(0);
/// Spinners that take part in the spread measurement (the free ones).
static SB_FREE: AtomicU32 = AtomicU32::new(0);
/// CPUs that ran any scenario thread (not the main thread), and when first (ns after T0).
static FIRST_ANY: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

fn all_cpus() -> u64 {
    (1u64 << ncpus()) - 1
}

/// Spawns worker `i` (the sysbench worker loop) and records its slot.
fn spawn_worker(i: u32, kind: usize, nice: i32, affinity: u64) {
    let slot = arch::sys_spawn(kind, i as usize, nice, affinity);
    if slot < 0 {
        defmt::error!("{}: FAIL cannot create thread {}", tag(), i);
        arch::exit(EXIT_FAILED);
    }
    SB_SLOTS[i as usize].store(slot as u32, Relaxed);
}

fn bench_main(mode: Mode, threads: u32, events: u32, maxprime: u32, nice: u32) {
    MODE.store(mode as u8, Relaxed);
    let n = ncpus();
    let total = match mode {
        Mode::Affinity => threads + AFF_PINNED.iter().map(|p| p.1).sum::<u32>(),
        _ => threads,
    };
    SB_THREADS.store(total, Relaxed);
    SB_FREE.store(if mode == Mode::Nice { 0 } else { threads }, Relaxed);
    SB_EVENTS.store(events, Relaxed);
    SB_MAXPRIME.store(maxprime, Relaxed);
    SB_PRIMES.store(count_primes(maxprime), Relaxed);
    if mode == Mode::Wakeone {
        // No start barrier: its wakeups would spread the threads by wakeup placement.
        SB_BARRIER.store(false, Relaxed);
    }
    kprintln!(
        "{}: {} threads, {} events, maxprime {} ({} primes per event), {} CPUs, hz={}, features {}",
        tag(),
        total,
        events,
        maxprime,
        SB_PRIMES.load(Relaxed),
        ncpus(),
        sched::hz(),
        defmt::Debug2Format(&sched::with_core(|k| k.features()))
    );
    MIGRATIONS_AT_T0.store(sched::MIGRATIONS.load(Relaxed), Relaxed);
    T0.store(arch::now_ns(), Release);
    ACTIVE.store(true, Release);
    match mode {
        Mode::Sysbench => (0..threads).for_each(|i| spawn_worker(i, KIND_SPINNER, 0, u64::MAX)),
        Mode::Wakeone => {
            kprintln!("wakeone: creating the threads pinned to CPU 0, then widening them to all CPUs");
            (0..threads).for_each(|i| spawn_worker(i, KIND_SPINNER, 0, 1));
            for i in 0..threads {
                let slot = SB_SLOTS[i as usize].load(Relaxed) as usize;
                if !arch::sys_set_affinity(slot, all_cpus()) {
                    defmt::error!("wakeone: FAIL set_affinity of thread {} refused", i);
                    arch::exit(EXIT_FAILED);
                }
            }
            kprintln!("wakeone: all {} threads widened at {} us", threads, since_t0() / 1000);
        }
        Mode::Affinity => {
            (0..threads).for_each(|i| spawn_worker(i, KIND_SPINNER, 0, u64::MAX));
            let mut i = threads;
            for &(cpu, count) in AFF_PINNED.iter() {
                let cpu = cpu.min(n - 1);
                kprintln!("affinity: {} threads pinned to CPU {}", count, cpu);
                for _ in 0..count {
                    spawn_worker(i, KIND_PINNED, 0, 1 << cpu);
                    i += 1;
                }
            }
        }
        Mode::Nice => {
            let cpu = n - 1;
            NICE_LEVEL.store(nice, Relaxed);
            NICE_CPU.store(cpu as u32, Relaxed);
            let half = threads / 2;
            kprintln!(
                "nice: {} threads at nice 0 and {} at nice {}, all pinned to CPU {}",
                half,
                threads - half,
                nice,
                cpu
            );
            for i in 0..threads {
                spawn_worker(i, KIND_SPINNER, if i < half { 0 } else { nice as i32 }, 1 << cpu);
            }
        }
    }
    SB_SLOTS_READY.store(true, Release);
    if SB_BARRIER.load(Relaxed) {
        // Like sysbench's main thread: wait at the start barrier too, then join.
        SB_MAIN_SLOT.store(sched::current_thread().map_or(u32::MAX, |s| s as u32), Relaxed);
        start_barrier();
    }
    // Like sysbench's main thread: wait for every worker, then report.
    let threads = SB_THREADS.load(Relaxed) as usize;
    let slots = SB_SLOTS.iter().take(threads).fold(0u64, |m, s| m | 1u64 << (s.load(Relaxed) as u64 & 63));
    sched::wait_threads(slots);
    if FINISHED.load(Acquire) as usize != threads {
        defmt::error!(
            "{}: FAIL the main thread woke with {} of {} workers finished",
            tag(),
            FINISHED.load(Acquire),
            threads
        );
        arch::exit(EXIT_FAILED);
    }
    sysbench_report();
}

/// The half-way runqueue lengths as plain numbers for logging.
fn half_nr_snapshot(h: &[AtomicU32; MAX_CPUS], n: usize) -> [u32; MAX_CPUS] {
    let mut out = [0u32; MAX_CPUS];
    for (o, v) in out.iter_mut().zip(h.iter()).take(n) {
        *o = v.load(Relaxed);
    }
    out
}

fn since_t0() -> u64 {
    arch::now_ns().saturating_sub(T0.load(Relaxed))
}

fn spinner(i: usize) {
    let events = SB_EVENTS.load(Relaxed);
    let maxprime = SB_MAXPRIME.load(Relaxed);
    let primes = SB_PRIMES.load(Relaxed);
    let seed = SB_SEED.load(Relaxed);
    if seed != 0 {
        // Start offset: 0..7 × 16 µs of work before the thread reaches the barrier, as
        // real threads start at different times (a Linux thread's clone-to-run latency is
        // tens of µs). Busy, not asleep, so it is the same in both QEMU modes.
        let until = arch::now_ns() + mix(seed as u64 ^ (i as u64) << 32) % 8 * START_OFFSET_UNIT_NS;
        while arch::now_ns() < until {
            core::hint::black_box(count_primes(START_OFFSET_PRIMES));
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
        if e == events / 2 {
            // Steady state: every thread is busy; how evenly are they spread?
            for (c, h) in HALF_NR.iter().enumerate().take(ncpus()) {
                h.store(sched::nr_running(c), Relaxed);
            }
            HALF_AT.store(since_t0(), Relaxed);
            snapshot_cpu_times(&HALF_CPU);
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
    if !END_SNAPPED.swap(true, AcqRel) {
        END_AT.store(since_t0(), Relaxed);
        snapshot_cpu_times(&END_CPU);
    }
    THREAD_END[i].store(arch::now_ns() - T0.load(Relaxed), Relaxed);
    FINISHED.fetch_add(1, AcqRel);
}

fn sysbench_report() -> ! {
    let tag = tag();
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
    ok &= check_invariants(tag);
    kprintln!("{}: total time {} us for {} events", tag, total / 1000, events);
    report_latency(tag, "event", events);
    for i in 0..threads {
        let slot = SB_SLOTS[i].load(Relaxed) as usize;
        kprintln!(
            "{}: thread {} did {} events, cpu time {} us, ran on CPUs {=u64:#010b}, finished at {} us",
            tag,
            i,
            THREAD_EVENTS[i].load(Relaxed),
            sched::thread_cpu_ns(slot) / 1000,
            sched::thread_ran_on(slot),
            THREAD_END[i].load(Relaxed) / 1000
        );
    }
    // Fair shares: CPU time per thread over the run, and runqueue lengths at half-way.
    let (mut lo, mut hi, mut sum_ns) = (u64::MAX, 0u64, 0u64);
    for slot in SB_SLOTS.iter().take(threads) {
        let c = sched::thread_cpu_ns(slot.load(Relaxed) as usize);
        lo = lo.min(c);
        hi = hi.max(c);
        sum_ns += c;
    }
    kprintln!(
        "{}: cpu time per thread min {} us max {} us mean {} us, max/min x1000 = {}",
        tag,
        lo / 1000,
        hi / 1000,
        sum_ns / threads.max(1) as u64 / 1000,
        hi * 1000 / lo.max(1)
    );
    // The same at steady state: from half-way until the first thread ran out of events,
    // after the start-up transient (fork placement, first balance passes).
    let (mut slo, mut shi) = (u64::MAX, 0u64);
    for (end, half) in END_CPU.iter().zip(HALF_CPU.iter()).take(threads) {
        let c = end.load(Relaxed).saturating_sub(half.load(Relaxed));
        slo = slo.min(c);
        shi = shi.max(c);
    }
    kprintln!(
        "{}: steady state ({} us to {} us): cpu time per thread min {} us max {} us, steady max/min x1000 = {}",
        tag,
        HALF_AT.load(Relaxed) / 1000,
        END_AT.load(Relaxed) / 1000,
        slo / 1000,
        shi / 1000,
        shi * 1000 / slo.max(1)
    );
    let (mut qlo, mut qhi) = (u32::MAX, 0u32);
    for h in HALF_NR.iter().take(n) {
        let v = h.load(Relaxed);
        qlo = qlo.min(v);
        qhi = qhi.max(v);
    }
    kprintln!(
        "{}: runqueue lengths at half-way {=[?]}, max-min = {}",
        tag,
        &half_nr_snapshot(&HALF_NR, n)[..n],
        qhi - qlo
    );
    kprintln!(
        "{}: exactly-once check: {} events, {} missing, {} done twice or more, {} beyond the range, thread sum {}, wrong results {} -> {}",
        tag,
        events,
        missing,
        duplicated,
        extra,
        sum,
        bad,
        if ok { "OK" } else { "FAIL" }
    );
    match mode() {
        Mode::Affinity => ok &= affinity_check(n),
        Mode::Nice => ok &= nice_check(threads),
        Mode::Sysbench | Mode::Wakeone => {}
    }
    let threads = SB_FREE.load(Relaxed) as usize;
    if threads != 0 {
        report_spread(tag, threads, n);
    }
    report_cpus(tag, n);
    kprintln!("{}: {}", tag, if ok { "OK" } else { "FAIL" });
    arch::exit(if ok { 0 } else { EXIT_FAILED })
}

/// `scenario=affinity`: no thread ever switched in outside its affinity, and every CPU ran
/// a scenario thread.
fn affinity_check(n: usize) -> bool {
    let v = sched::AFFINITY_VIOLATIONS.load(Relaxed);
    let mut ok = v == 0;
    match sched::FIRST_VIOLATION.load(Relaxed) {
        0 => kprintln!("affinity: no thread ran outside its affinity (checked on every switch-in)"),
        f => defmt::error!(
            "affinity: FAIL {} switch-ins outside the affinity, the first: thread slot {} on CPU {}",
            v,
            (f - 1) >> 8,
            (f - 1) & 0xff
        ),
    }
    for (c, f) in FIRST_ANY.iter().enumerate().take(n) {
        let f = f.load(Relaxed);
        if f == 0 {
            defmt::error!("affinity: FAIL cpu {} never ran a scenario thread", c);
            ok = false;
        } else {
            kprintln!("affinity: cpu {} first ran a scenario thread at {} us", c, f / 1000);
        }
    }
    ok
}

/// `scenario=nice`: CPU time per group against the weight ratio.
fn nice_check(threads: usize) -> bool {
    let nice = NICE_LEVEL.load(Relaxed) as usize;
    let half = threads / 2;
    let cpu_of = |i: usize| END_CPU[i].load(Relaxed).saturating_sub(NICE_START[i].load(Relaxed));
    let g0: u64 = (0..half).map(cpu_of).sum::<u64>() / half as u64;
    let g1: u64 = (half..threads).map(cpu_of).sum::<u64>() / (threads - half) as u64;
    for i in 0..threads {
        kprintln!(
            "nice: thread {} (nice {}) CPU time {} us from the barrier until the events ran out",
            i,
            if i < half { 0 } else { nice },
            cpu_of(i) / 1000
        );
    }
    let w = sched_core::weights::PRIO_TO_WEIGHT[20 + nice] as u64;
    // Ratios ×1000.
    let expected = 1024 * 1000 / w;
    let measured = g0 * 1000 / g1.max(1);
    let dev = measured.abs_diff(expected) * 100 / expected;
    let ok = dev <= NICE_MARGIN_PCT;
    kprintln!(
        "nice: CPU {}, window of competition {}..{} us: mean CPU time per thread: nice 0 {} us, nice {} {} us",
        NICE_CPU.load(Relaxed),
        NICE_START_AT.load(Relaxed) / 1000,
        END_AT.load(Relaxed) / 1000,
        g0 / 1000,
        nice,
        g1 / 1000
    );
    kprintln!(
        "nice: CPU-time ratio nice 0 / nice {} = {}.{=u64:03}, expected 1024/{} = {}.{=u64:03}, off by {} % (margin {} %) -> {}",
        nice,
        measured / 1000,
        measured % 1000,
        w,
        expected / 1000,
        expected % 1000,
        dev,
        NICE_MARGIN_PCT,
        if ok { "OK" } else { "FAIL" }
    );
    ok
}

fn report_spread(tag: &str, threads: usize, n: usize) {
    let spread_goal = if threads < n {
        "each of as many CPUs as threads runs exactly one spinner"
    } else if threads == n {
        "every CPU runs exactly one spinner"
    } else {
        "every CPU runs a spinner"
    };
    match SPREAD.load(Acquire) {
        0 => kprintln!("{}: spread never reached ({})", tag, spread_goal),
        s => kprintln!(
            "{}: spread time {} us (first spinner created -> {}), {} migrations before it",
            tag,
            s / 1000,
            spread_goal,
            SPREAD_MIGRATIONS.load(Relaxed)
        ),
    }
    for (c, f) in FIRST_SPINNER.iter().enumerate().take(n) {
        let f = f.load(Relaxed);
        kprintln!("{}: cpu {} first spinner at {} us", tag, c, if f == 0 { -1 } else { (f / 1000) as i64 });
    }
}

fn check_spread(now: u64) {
    let threads = SB_FREE.load(Relaxed);
    if threads == 0 || SPREAD.load(Relaxed) != 0 {
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
    if kind.is_some_and(|k| k != KIND_MAIN) && FIRST_ANY[cpu].load(Relaxed) == 0 {
        FIRST_ANY[cpu].store(now.saturating_sub(T0.load(Relaxed)).max(1), Relaxed);
    }
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
    // Wakee placement: where the core put each woken thread.
    kprintln!(
        "pingpong: wakee placement: {} wakeups, {} onto an idle CPU, {} moved to another CPU",
        sched::WAKEUPS.load(Relaxed),
        sched::WAKEUPS_ONTO_IDLE.load(Relaxed),
        sched::MIGRATIONS_BY_REASON[0].load(Relaxed)
    );
    report_latency("pingpong", "round trip", pairs * rounds);
    ok &= check_invariants("pingpong");
    report_cpus("pingpong", ncpus());
    kprintln!("pingpong: {}", if ok { "OK" } else { "FAIL" });
    arch::exit(if ok { 0 } else { EXIT_FAILED })
}

// ---- churn --------------------------------------------------------------------------------

/// Serial numbers of churn threads: one per live thread, reused once its thread has exited,
/// so a run of any length never runs out (more than the threads that can be alive at once).
const CH_SERIALS: usize = 256;
/// Most churn threads alive at once (the pool has 64 slots).
const CH_LIVE_MAX: u32 = 32;
/// Operation kinds, as counted.
const CH_OP_NAMES: [&str; 8] =
    ["spawn", "exit", "park", "unpark", "unpark (none parked)", "yield", "sleep", "spawn refused"];
const OP_SPAWN: usize = 0;
const OP_EXIT: usize = 1;
const OP_PARK: usize = 2;
const OP_UNPARK: usize = 3;
const OP_UNPARK_NONE: usize = 4;
const OP_YIELD: usize = 5;
const OP_SLEEP: usize = 6;
const OP_SPAWN_REFUSED: usize = 7;

static CH_TARGET: AtomicU32 = AtomicU32::new(0);
static CH_OPS: AtomicU32 = AtomicU32::new(0);
static CH_COUNT: [AtomicU32; 8] = [const { AtomicU32::new(0) }; 8];
static CH_EXIT_AT_STOP: AtomicU32 = AtomicU32::new(0);
/// Where the search for a free serial starts next.
static CH_NEXT_SERIAL: AtomicU32 = AtomicU32::new(0);
/// Per serial: held by a live (or being spawned) thread.
static CH_HELD: [AtomicBool; CH_SERIALS] = [const { AtomicBool::new(false) }; CH_SERIALS];
/// Per serial: threads spawned, started and exited with it. At the end all three agree for
/// every serial exactly when every thread ran once and exited once.
static CH_SPAWNED: [AtomicU32; CH_SERIALS] = [const { AtomicU32::new(0) }; CH_SERIALS];
static CH_STARTED: [AtomicU32; CH_SERIALS] = [const { AtomicU32::new(0) }; CH_SERIALS];
static CH_EXITED: [AtomicU32; CH_SERIALS] = [const { AtomicU32::new(0) }; CH_SERIALS];
/// Churn children alive or being spawned.
static CH_LIVE: AtomicU32 = AtomicU32::new(0);
/// Thread slot → parked (set by the thread before it parks; cleared by whoever unparks it).
static CH_PARKED: [AtomicBool; arch::MAX_THREADS] = [const { AtomicBool::new(false) }; arch::MAX_THREADS];
static CH_STOP: AtomicBool = AtomicBool::new(false);

/// xorshift64.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Rng {
        Rng(mix(seed ^ stream.wrapping_mul(0x9E37_79B9)) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Counts one operation; the one that reaches the target stops the run.
fn churn_op(kind: usize) {
    CH_COUNT[kind].fetch_add(1, Relaxed);
    if CH_OPS.fetch_add(1, AcqRel) + 1 >= CH_TARGET.load(Relaxed) {
        CH_STOP.store(true, SeqCst);
    }
}

/// Spawns a churn child unless too many are alive. A spawn the kernel refuses is counted as
/// an operation (so the run still ends) and fails the run's check.
fn churn_spawn() -> bool {
    if CH_LIVE.fetch_add(1, AcqRel) >= CH_LIVE_MAX {
        CH_LIVE.fetch_sub(1, AcqRel);
        return false;
    }
    // At most CH_LIVE_MAX serials are held, so a free one is always found.
    let start = CH_NEXT_SERIAL.fetch_add(1, Relaxed) as usize;
    let serial = (0..CH_SERIALS)
        .map(|k| (start + k) % CH_SERIALS)
        .find(|&s| CH_HELD[s].compare_exchange(false, true, Acquire, Relaxed).is_ok());
    let spawned = serial.is_some_and(|s| {
        CH_SPAWNED[s].fetch_add(1, Relaxed);
        if arch::sys_spawn(KIND_CHURN, s, 0, u64::MAX) < 0 {
            CH_SPAWNED[s].fetch_sub(1, Relaxed);
            CH_HELD[s].store(false, Release);
            return false;
        }
        true
    });
    if spawned {
        churn_op(OP_SPAWN);
    } else {
        CH_LIVE.fetch_sub(1, AcqRel);
        churn_op(OP_SPAWN_REFUSED);
    }
    spawned
}

/// Unparks one parked churn thread, searching from a random slot.
fn churn_unpark(rng: &mut Rng) {
    let start = (rng.next() % arch::MAX_THREADS as u64) as usize;
    for k in 0..arch::MAX_THREADS {
        let s = (start + k) % arch::MAX_THREADS;
        if CH_PARKED[s].compare_exchange(true, false, SeqCst, Relaxed).is_ok() {
            if !arch::sys_unpark(s) {
                defmt::error!("churn: FAIL parked thread slot {} is not a live thread", s);
                arch::exit(EXIT_FAILED);
            }
            churn_op(OP_UNPARK);
            return;
        }
    }
    churn_op(OP_UNPARK_NONE);
}

/// Unparks every parked churn thread (after the stop).
fn churn_unpark_all() {
    for (s, p) in CH_PARKED.iter().enumerate() {
        if p.compare_exchange(true, false, SeqCst, Relaxed).is_ok() {
            arch::sys_unpark(s);
        }
    }
}

fn churn_sleep(rng: &mut Rng) {
    arch::sys_sleep(rng.next() % 2_000_000 + 1);
    churn_op(OP_SLEEP);
}

fn churn_main(ops: u32) {
    CH_TARGET.store(ops, Relaxed);
    let seed = SB_SEED.load(Relaxed) as u64;
    kprintln!(
        "churn: {} operations, seed {}, at most {} threads alive, {} CPUs, hz={}",
        ops,
        seed,
        CH_LIVE_MAX,
        ncpus(),
        sched::hz()
    );
    T0.store(arch::now_ns(), Release);
    let mut rng = Rng::new(seed, u64::MAX);
    // The main thread never parks or exits before the stop: it keeps the population alive
    // and unparks, so the run cannot deadlock with every thread parked.
    while !CH_STOP.load(SeqCst) {
        if CH_LIVE.load(Relaxed) < 4 {
            churn_spawn();
            continue;
        }
        match rng.next() % 10 {
            0..=2 => {
                churn_spawn();
            }
            3..=6 => churn_unpark(&mut rng),
            7..=8 => {
                arch::sys_yield();
                churn_op(OP_YIELD);
            }
            _ => churn_sleep(&mut rng),
        }
    }
    let stopped = since_t0();
    kprintln!("churn: {} operations reached at {} us; waiting for every thread to exit", ops, stopped / 1000);
    let deadline = arch::now_ns() + 20_000_000_000;
    while CH_LIVE.load(Acquire) != 0 {
        churn_unpark_all();
        if arch::now_ns() > deadline {
            defmt::error!("churn: FAIL {} threads still alive 20 s after the stop", CH_LIVE.load(Acquire));
            arch::exit(EXIT_FAILED);
        }
        // Sleep, not spin: under icount a vCPU that spins (even with `yield`) while every
        // other one waits in WFI can hold back their timer interrupts for a long time.
        arch::sys_sleep(1_000_000);
    }
    // The last exits free their slots when their CPUs switch away from them.
    let me = 1;
    // This thread may sleep between checks (one tick at a time).
    let settled = wait_with(
        arch::now_ns() + 1_000_000_000,
        || sched::threads_in_use() == me && sched::with_core(|k| k.nr_tasks()) == me,
        || arch::sys_sleep(1_000_000),
    );
    churn_report(settled)
}

fn churn_child(serial: usize) {
    CH_STARTED[serial].fetch_add(1, Relaxed);
    let me = sched::current_thread().unwrap_or(usize::MAX);
    let mut rng = Rng::new(SB_SEED.load(Relaxed) as u64, serial as u64);
    let mut exited = false;
    while !CH_STOP.load(SeqCst) {
        core::hint::black_box(count_primes(20 + (rng.next() % 200) as u32));
        match rng.next() % 100 {
            0..=9 => {
                if !churn_spawn() {
                    arch::sys_yield();
                    churn_op(OP_YIELD);
                }
            }
            10..=19 => {
                exited = true;
                break;
            }
            20..=39 => {
                let Some(p) = CH_PARKED.get(me) else { continue };
                p.store(true, SeqCst);
                if CH_STOP.load(SeqCst) {
                    // Whoever already claimed the flag unparks us; the token is harmless.
                    let _ = p.compare_exchange(true, false, SeqCst, Relaxed);
                    break;
                }
                arch::sys_park();
                churn_op(OP_PARK);
            }
            40..=59 => churn_unpark(&mut rng),
            60..=79 => {
                arch::sys_yield();
                churn_op(OP_YIELD);
            }
            _ => churn_sleep(&mut rng),
        }
    }
    if exited {
        churn_op(OP_EXIT);
    } else {
        CH_EXIT_AT_STOP.fetch_add(1, Relaxed);
    }
    CH_EXITED[serial].fetch_add(1, Relaxed);
    CH_HELD[serial].store(false, Release);
    CH_LIVE.fetch_sub(1, AcqRel);
}

fn churn_report(settled: bool) -> ! {
    let (mut spawned, mut lost, mut twice) = (0u32, 0u32, 0u32);
    for s in 0..CH_SERIALS {
        let sp = CH_SPAWNED[s].load(Relaxed);
        let (st, ex) = (CH_STARTED[s].load(Relaxed), CH_EXITED[s].load(Relaxed));
        spawned += sp;
        // Threads of this serial that never started or never exited, and starts or exits
        // beyond the spawns.
        lost += sp.saturating_sub(st.min(ex));
        twice += st.max(ex).saturating_sub(sp);
    }
    let exits = CH_COUNT[OP_EXIT].load(Relaxed) + CH_EXIT_AT_STOP.load(Relaxed);
    let total = CH_OPS.load(Relaxed);
    kprintln!("churn: {} operations in {} us", total, since_t0() / 1000);
    for (name, c) in CH_OP_NAMES.iter().zip(CH_COUNT.iter()) {
        kprintln!("churn: {} {}", name, c.load(Relaxed));
    }
    kprintln!(
        "churn: threads spawned {}, spawn refused {}, exited {} ({} by choice, {} at the stop), sleeps pending {}",
        spawned,
        CH_COUNT[OP_SPAWN_REFUSED].load(Relaxed),
        exits,
        CH_COUNT[OP_EXIT].load(Relaxed),
        CH_EXIT_AT_STOP.load(Relaxed),
        sched::sleepers()
    );
    let mut ok = lost == 0 && twice == 0 && exits == spawned && CH_COUNT[OP_SPAWN_REFUSED].load(Relaxed) == 0;
    kprintln!(
        "churn: exactly-once check: {} threads, {} never started or never exited, {} started or exited twice, exits {} = spawns {} -> {}",
        spawned,
        lost,
        twice,
        exits,
        spawned,
        if ok { "OK" } else { "FAIL" }
    );
    kprintln!(
        "churn: kernel threads in use {}, core tasks {} (expected 1 each: the main thread) -> {}",
        sched::threads_in_use(),
        sched::with_core(|k| k.nr_tasks()),
        if settled { "OK" } else { "FAIL" }
    );
    ok &= settled;
    ok &= check_invariants("churn");
    report_cpus("churn", ncpus());
    kprintln!("churn: {}", if ok { "OK" } else { "FAIL" });
    arch::exit(if ok { 0 } else { EXIT_FAILED })
}

// ---- corecalls -----------------------------------------------------------------------------

fn corecalls_main(rounds: u32) {
    let n = ncpus();
    kprintln!("corecalls: {} threads, {} calls each, hz={}", n, rounds, sched::hz());
    let mut slots = 0u64;
    for cpu in 0..n {
        let slot = arch::sys_spawn(KIND_CORECALLS, rounds as usize, 0, 1 << cpu);
        if slot < 0 {
            defmt::error!("corecalls: FAIL cannot create the thread for CPU {}", cpu);
            arch::exit(EXIT_FAILED);
        }
        slots |= 1 << slot;
    }
    // Reaching this point is the test: a call that never returned would have hung its CPU
    // (the watchdog's exit, or the suite's time limit).
    sched::wait_threads(slots);
    let ok = check_invariants("corecalls");
    let calls = n as u64 * rounds as u64 * 2;
    kprintln!("corecalls: all {} calls returned -> {}", calls, if ok { "OK" } else { "FAIL" });
    arch::exit(if ok { 0 } else { EXIT_FAILED })
}

/// Queries that take the core's locks (this CPU's balance lock, the task table), from thread
/// context, as report and wait loops do.
fn corecalls(rounds: usize) {
    let cpu = arch::cpu_id();
    for _ in 0..rounds {
        let _ = sched::with_core(|k| k.smp().balance_state(cpu));
        let _ = sched::with_core(|k| k.nr_tasks());
    }
}

// ---- hang ---------------------------------------------------------------------------------

fn hang_main(cpu: u32) {
    let n = ncpus() as u32;
    let other = (cpu + 1) % n;
    kprintln!(
        "hang: a thread on CPU {} masks IRQs and spins; a busy thread keeps CPU {} ticking; the watchdog must exit {}",
        cpu,
        other,
        sched::EXIT_WATCHDOG
    );
    if arch::sys_spawn(KIND_BUSY, 0, 0, 1 << other) < 0 || arch::sys_spawn(KIND_HANG, 0, 0, 1 << cpu) < 0 {
        defmt::error!("hang: FAIL cannot create the threads");
        arch::exit(EXIT_FAILED);
    }
}

/// Masks IRQs and spins forever: this CPU stops ticking.
fn hang() {
    kprintln!("hang: CPU {} masks IRQs now", arch::cpu_id());
    let _irq = arch::IrqGuard::mask();
    loop {
        // `yield`, not `isb`: under icount an isb-spin makes guest time crawl.
        arch::relax();
    }
}
