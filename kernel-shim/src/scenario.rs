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
//!   switched in outside its affinity, and every CPU must run a scenario thread.
//! * `scenario=nice threads=N nice=K events=M`: half the threads at nice 0, half at nice K,
//!   all on one CPU; their CPU-time ratio must be within `NICE_MARGIN_PCT` (15 %) of the weight ratio.
//! * `scenario=churn ops=N seed=S`: random spawn/exit/park/unpark/yield/sleep until N
//!   operations; every thread must start and exit exactly once.
//! * `scenario=hang cpu=C`: a thread on CPU C spins with IRQs masked; the watchdog exits 5.
//! * `scenario=program`: the workload program the runner loaded (an rt-app file, lowered),
//!   one kernel thread per program thread; exit 0, 3 if no valid program was loaded.
//! * `scenario=groups duration_ms=D`: task groups as cgroup v2 has them: weights 50/100/150
//!   with a spinner per CPU each (shares beside 1:2:3), then `cpu.max` "10000 100000" on a
//!   group with a spinner per CPU (beside 0.1 CPU); D ms per case (default 1000) after a
//!   quarter of it of warm-up; exit 0 if every group ran. Not on a microcontroller.
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

use sched_core::{Features, MigrateReason, Outcome};
use sched_workload::limits::MAX_MODEL_US;

use crate::arch::{self, MAX_CPUS};
use crate::kprintln;
use crate::sched;

mod bench;
mod boot;
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
use churn::{churn_child, churn_main};
use corecalls::{corecalls, corecalls_main};
use hang::{hang, hang_main};
use keys::Keys;
#[cfg(not(target_arch = "arm"))]
use latency::{latency_main, lt_spinner, periodic};
use pingpong::{ping, pingpong_main, pong};

/// Exit code for a bad command line.
pub const EXIT_BAD_ARGS: u32 = 3;
/// Exit code when the machine is not what the kernel needs (no DTB, no PSCI, ...).
pub const EXIT_MACHINE: u32 = 4;
/// Exit code when a scenario's check fails.
pub const EXIT_FAILED: u32 = 1;

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
    /// Spinners beside periodic threads with short and default EEVDF slices, under CFS and
    /// then EEVDF in one boot: wake-to-run times and shares.
    Latency(Latency),
    /// The workload program the runner loaded (an rt-app file): one kernel thread per
    /// program thread; every activation and each thread's CPU time logged.
    Program,
    /// Task groups: weights 50/100/150 and a `cpu.max` cap, each case `duration_ms` long.
    Groups {
        /// Each case's measured window (ms).
        duration_ms: u32,
    },
}

/// Which policies `scenario=latency` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policies {
    /// CFS, then EEVDF.
    Both,
    /// CFS only.
    Cfs,
    /// EEVDF only.
    Eevdf,
}

/// The workload's parameters (boot keys `spinners=`, `periodic=`, `run_us=`, `sleep_us=`,
/// `short_slice_us=`, `duration_ms=`, `policy=`).
#[derive(Clone, Copy, Debug)]
pub struct Latency {
    /// Spinners.
    pub spinners: u32,
    /// Periodic threads (every other one with the short slice).
    pub periodic: u32,
    /// A periodic thread's CPU time per period (µs).
    pub run_us: u32,
    /// Its sleep per period (µs).
    pub sleep_us: u32,
    /// The short slice (µs).
    pub slice_us: u32,
    /// Each phase's length (ms).
    pub duration_ms: u32,
    /// The policies, in order.
    pub policies: Policies,
}

impl Latency {
    /// Two spinners per CPU of an 8-CPU machine and one periodic thread per CPU: 0.5 ms of
    /// CPU then 4.5 ms asleep, half of them with 0.5 ms slices; 500 ms per phase, both
    /// policies (the simulator's latency workload, shorter).
    pub const DEFAULT: Latency = Latency {
        spinners: 16,
        periodic: 8,
        run_us: 500,
        sleep_us: 4500,
        slice_us: 500,
        duration_ms: 500,
        policies: Policies::Both,
    };
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
    /// Per-CPU capacities (`capacity=446*4,1024*4`); none given: from the device tree.
    pub capacity: crate::topology::Capacities,
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
        "threads",
        "events",
        "maxprime",
        "cpu",
        "pairs",
        "rounds",
        "seed",
        "clusters",
        "nice",
        "ops",
        "watchdog",
        "slice_us",
        "create_us",
        "setup_us",
        "spinners",
        "periodic",
        "run_us",
        "sleep_us",
        "short_slice_us",
        "duration_ms",
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
    /// `capacity=` is not a list of capacities.
    Capacity,
    /// `entry_race=on` on a machine without that firmware race.
    EntryRace,
    /// `policy=` is not `both`, `cfs` or `eevdf`.
    Policy,
    /// `scenario=latency` with more spinners and periodic threads than a run may have.
    LatencyThreads,
    /// `scenario=latency` on a kernel built without EEVDF (a microcontroller's).
    NoEevdf,
    /// `scenario=program` on a machine that takes no workload program.
    NoProgram,
    /// `scenario=groups` on a kernel built without task groups (a microcontroller's).
    NoGroups,
    /// A key the chosen scenario does not read (another scenario's; see `keys.rs`).
    NotRead,
}

impl core::fmt::Display for ArgError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ArgError::NotKeyValue => write!(f, "expected key=value"),
            ArgError::UnknownKey => {
                write!(
                    f,
                    "unknown key (known: scenario threads events maxprime seed create_us setup_us barrier clusters capacity pairs rounds cpu fault nice ops watchdog slice_us entry_race spinners periodic run_us sleep_us short_slice_us duration_ms policy hz nohz skew idle_yield features trace)"
                )
            }
            ArgError::UnknownScenario => {
                write!(f, "unknown scenario (known:")?;
                for (name, _) in keys::SCENARIOS {
                    write!(f, " {name}")?;
                }
                write!(f, ")")
            }
            ArgError::Range { key, min, max } => write!(f, "{key} must be a number in {min}..={max}"),
            ArgError::Hz => write!(f, "hz must be one of {:?}", sched::HZ_CHOICES),
            ArgError::Feature => write!(f, "unknown feature switch in the features list"),
            ArgError::OnOff => write!(f, "nohz, skew, idle_yield, barrier, trace and entry_race must be on or off"),
            ArgError::Fault => write!(f, "fault must be udf or stack"),
            ArgError::EntryRace => write!(f, "entry_race=on needs riscv64 (its SBI firmware has the race)"),
            ArgError::Policy => write!(f, "policy must be both, cfs or eevdf"),
            ArgError::LatencyThreads => write!(f, "spinners + periodic must be at most {}", MAX_SPINNERS),
            ArgError::NoEevdf => write!(f, "this kernel has no EEVDF (a microcontroller's is built without it)"),
            ArgError::NoProgram => write!(f, "this machine takes no workload program (a microcontroller's RAM holds the kernel alone)"),
            ArgError::NoGroups => write!(f, "this kernel has no task groups (a microcontroller's is built without them)"),
            ArgError::NotRead => {
                write!(f, "the chosen scenario does not read this key (the kernel's README lists each one's keys)")
            }
            ArgError::Capacity => write!(
                f,
                "capacity must list each CPU's capacity in 1..=1024, comma-separated, a value*count repeating it (at most {} CPUs)",
                MAX_CPUS
            ),
        }
    }
}

impl Config {
    /// Parses `bootargs`; `bad` receives the offending word on error.
    pub fn parse<'a>(bootargs: &'a str, bad: &mut &'a str) -> Result<Config, ArgError> {
        let mut scenario = "boot";
        // (A microcontroller's pool takes fewer threads and pairs than the defaults elsewhere.)
        let (mut threads, mut events, mut maxprime, mut cpu) = (8.min(MAX_SPINNERS), 1000, 2000, 0);
        let mut events_set = false;
        let (mut pairs, mut rounds) = (4.min(MAX_PAIRS), 1000);
        let mut hz = sched::DEFAULT_HZ;
        let mut features = Features::DEFAULT;
        let mut nohz = false;
        let mut skew = true;
        let mut clusters = 0;
        let mut capacity = crate::topology::Capacities::NONE;
        let mut fault = Fault::Udf;
        let (mut nice, mut ops) = (5, 10_000);
        let mut lat = Latency::DEFAULT;
        let mut duration_set = false;
        let reads = Keys::read_by(Keys::scenario_of(bootargs));
        let own = |key: Keys| if reads.contains(key) { Ok(()) } else { Err(ArgError::NotRead) };
        for word in bootargs.split_ascii_whitespace() {
            *bad = word;
            let (k, v) = word.split_once('=').ok_or(ArgError::NotKeyValue)?;
            match k {
                "scenario" => scenario = v,
                "threads" => {
                    own(Keys::THREADS)?;
                    threads = number(k, v, 1, MAX_SPINNERS)?;
                }
                "events" => {
                    own(Keys::EVENTS)?;
                    events = number(k, v, 1, MAX_EVENTS)?;
                    events_set = true;
                }
                "maxprime" => {
                    own(Keys::MAXPRIME)?;
                    maxprime = number(k, v, 3, 10_000_000)?;
                }
                "seed" => {
                    own(Keys::SEED)?;
                    SB_SEED.store(number(k, v, 0, u32::MAX)?, Relaxed);
                }
                "create_us" => {
                    own(Keys::CREATE_US)?;
                    SB_CREATE_NS.store(number(k, v, 0, MAX_MODEL_US)? as u64 * 1000, Relaxed);
                }
                "setup_us" => {
                    own(Keys::SETUP_US)?;
                    SB_SETUP_NS.store(number(k, v, 0, MAX_MODEL_US)? as u64 * 1000, Relaxed);
                }
                "clusters" => clusters = number(k, v, 0, MAX_CPUS as u32)?,
                "capacity" => capacity = crate::topology::Capacities::parse(v).ok_or(ArgError::Capacity)?,
                "cpu" => {
                    own(Keys::CPU)?;
                    cpu = number(k, v, 0, MAX_CPUS as u32 - 1)?;
                }
                "pairs" => {
                    own(Keys::PAIRS)?;
                    pairs = number(k, v, 1, MAX_PAIRS)?;
                }
                "rounds" => {
                    own(Keys::ROUNDS)?;
                    rounds = number(k, v, 1, 1_000_000)?;
                }
                "nice" => {
                    own(Keys::NICE)?;
                    nice = number(k, v, 1, 19)?;
                }
                "ops" => {
                    own(Keys::OPS)?;
                    ops = number(k, v, 1, 1_000_000)?;
                }
                "watchdog" => sched::set_watchdog_ticks(number(k, v, 0, sched::MAX_WATCHDOG_TICKS)?),
                "spinners" => {
                    own(Keys::SPINNERS)?;
                    lat.spinners = number(k, v, 0, MAX_SPINNERS)?;
                }
                "periodic" => {
                    own(Keys::PERIODIC)?;
                    lat.periodic = number(k, v, 2, MAX_SPINNERS)?;
                }
                "run_us" => {
                    own(Keys::RUN_US)?;
                    lat.run_us = number(k, v, 1, 100_000)?;
                }
                "sleep_us" => {
                    own(Keys::SLEEP_US)?;
                    lat.sleep_us = number(k, v, 1, 1_000_000)?;
                }
                "short_slice_us" => {
                    own(Keys::SHORT_SLICE_US)?;
                    lat.slice_us = number(k, v, 100, 100_000)?;
                }
                "duration_ms" => {
                    own(Keys::DURATION_MS)?;
                    lat.duration_ms = number(k, v, 1, 60_000)?;
                    duration_set = true;
                }
                "policy" => {
                    own(Keys::POLICY)?;
                    lat.policies = match v {
                        "both" => Policies::Both,
                        "cfs" => Policies::Cfs,
                        "eevdf" => Policies::Eevdf,
                        _ => return Err(ArgError::Policy),
                    }
                }
                "slice_us" => arch::set_slice_us(number(k, v, 0, arch::MAX_SLICE_US as u32)? as u64),
                "entry_race" => {
                    if !arch::simulate_entry_race(on_off(v)?) {
                        return Err(ArgError::EntryRace);
                    }
                }
                // Any other value (out of range or not a number) is told the rates there are.
                "hz" => hz = v.parse().ok().filter(|h| sched::HZ_CHOICES.contains(h)).ok_or(ArgError::Hz)?,
                "fault" => {
                    own(Keys::FAULT)?;
                    fault = match v {
                        "udf" => Fault::Udf,
                        "stack" => Fault::Stack,
                        _ => return Err(ArgError::Fault),
                    }
                }
                "trace" => sched::set_trace(on_off(v)?),
                "barrier" => {
                    own(Keys::BARRIER)?;
                    SB_BARRIER.store(on_off(v)?, Relaxed);
                }
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
                    // (Only a given `threads=` is below 2: the word is its last.)
                    *bad = bootargs
                        .split_ascii_whitespace()
                        .rfind(|w| w.starts_with("threads="))
                        .unwrap_or("threads");
                    return Err(ArgError::Range { key: "threads", min: 2, max: MAX_SPINNERS });
                }
                // Long enough for many scheduling periods (about 0.5 s on one CPU).
                let events = if events_set { events } else { NICE_EVENTS };
                Scenario::Nice { threads, nice, events, maxprime }
            }
            "churn" => Scenario::Churn { ops },
            "hang" => Scenario::Hang { cpu },
            "corecalls" => Scenario::Corecalls { rounds },
            "program" => {
                if arch::PROGRAM_WINDOW.is_none() {
                    *bad = "scenario=program";
                    return Err(ArgError::NoProgram);
                }
                Scenario::Program
            }
            "groups" => {
                *bad = "scenario=groups";
                if cfg!(target_arch = "arm") {
                    return Err(ArgError::NoGroups);
                }
                Scenario::Groups { duration_ms: if duration_set { lat.duration_ms } else { 1000 } }
            }
            "latency" => {
                *bad = "scenario=latency";
                if cfg!(target_arch = "arm") {
                    return Err(ArgError::NoEevdf);
                }
                if lat.spinners + lat.periodic > MAX_SPINNERS {
                    return Err(ArgError::LatencyThreads);
                }
                Scenario::Latency(lat)
            }
            other => {
                *bad = other;
                return Err(ArgError::UnknownScenario);
            }
        };
        *bad = "";
        Ok(Config { scenario, hz, features, nohz, clusters, capacity, skew })
    }
}

impl Scenario {
    /// Its name on the boot line.
    fn name(&self) -> &'static str {
        match self {
            Scenario::Boot => "boot",
            Scenario::Sysbench { .. } => "sysbench",
            Scenario::Pingpong { .. } => "pingpong",
            Scenario::Fault { .. } => "fault",
            Scenario::Panic { .. } => "panic",
            Scenario::Wakeone { .. } => "wakeone",
            Scenario::Affinity { .. } => "affinity",
            Scenario::Nice { .. } => "nice",
            Scenario::Churn { .. } => "churn",
            Scenario::Hang { .. } => "hang",
            Scenario::Corecalls { .. } => "corecalls",
            Scenario::Program => "program",
            Scenario::Groups { .. } => "groups",
            Scenario::Latency(_) => "latency",
        }
    }

    /// The kernel threads it runs at once at most on `ncpus` CPUs, its main thread included.
    /// (`churn` keeps its own bound; `program` checks its program against the thread table.)
    fn threads(&self, ncpus: u32) -> u32 {
        1 + match *self {
            Scenario::Boot | Scenario::Churn { .. } | Scenario::Program => 0,
            Scenario::Sysbench { threads, .. }
            | Scenario::Wakeone { threads, .. }
            | Scenario::Nice { threads, .. } => threads,
            Scenario::Affinity { .. } => AFF_FREE + bench::AFF_PINNED.iter().map(|p| p.1).sum::<u32>(),
            Scenario::Pingpong { pairs, .. } => 2 * pairs,
            Scenario::Panic { .. } | Scenario::Fault { .. } => 1,
            // The hanging thread and a busy one on another CPU.
            Scenario::Hang { .. } => 2,
            Scenario::Corecalls { .. } => ncpus,
            Scenario::Latency(l) => l.spinners + l.periodic,
            // Three groups of a spinner per CPU; 40 spinners against one.
            Scenario::Groups { .. } => (3 * ncpus).max(41),
        }
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
    let deepest = (0..n).map(arch::exc_stack_high_water).max().unwrap_or(0);
    kprintln!(
        "{}: exception stack high-water: {} of {} bytes (deepest CPU)",
        tag,
        deepest,
        arch::EXC_STACK_SIZE
    );
    kprintln!(
        "{}: thread stack high-water: {} of {} bytes (deepest thread)",
        tag,
        arch::thread_stack_high_water(),
        arch::STACK_SIZE
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
