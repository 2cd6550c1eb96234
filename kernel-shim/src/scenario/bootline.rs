//! The boot line (`/chosen/bootargs`, QEMU `-append`): what it names — the scenario and its
//! parameters, the tick rate, the core's feature switches, the topology's clusters and
//! capacities — and its parser. Every malformed word is an [`ArgError`], which `main` prints
//! as one line before it exits with [`super::EXIT_BAD_ARGS`]; which keys each scenario
//! reads is in `keys.rs`.

use portable_atomic::Ordering::Relaxed;

use sched_core::Features;
use sched_workload::limits::MAX_MODEL_US;

use super::keys::{self, Keys};
use super::{
    bench, AFF_EVENTS, AFF_FREE, MAX_EVENTS, MAX_PAIRS, MAX_SPINNERS, NICE_EVENTS, SB_BARRIER, SB_CREATE_NS,
    SB_SEED, SB_SETUP_NS,
};
use crate::arch::{self, MAX_CPUS};
use crate::sched;

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
    /// Recursion into the canary's band at the bottom of the thread's stack: the canary check
    /// reports it.
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
    /// `features=` names a switch the core does not know, or one switch twice.
    Feature(sched_core::FeatureListError),
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
    /// A key given a second time.
    Repeated,
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
            ArgError::Feature(e) => write!(f, "{} in the features list", e),
            ArgError::OnOff => write!(f, "nohz, skew, idle_yield, barrier, trace and entry_race must be on or off"),
            ArgError::Fault => write!(f, "fault must be udf or stack"),
            ArgError::EntryRace => write!(f, "entry_race=on needs riscv64 (its SBI firmware has the race)"),
            ArgError::Policy => write!(f, "policy must be both, cfs or eevdf"),
            ArgError::LatencyThreads => write!(f, "spinners + periodic must be at most {}", MAX_SPINNERS),
            ArgError::NoEevdf => write!(f, "this kernel has no EEVDF (a microcontroller's is built without it)"),
            ArgError::NoProgram => write!(f, "this machine takes no workload program (a microcontroller's RAM holds the kernel alone)"),
            ArgError::NoGroups => write!(f, "this kernel has no task groups (a microcontroller's is built without them)"),
            ArgError::Repeated => write!(f, "a key given twice (each at most once)"),
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
        // The kernel's own settings, set only once the whole line is accepted.
        let mut set = Settings::default();
        let mut scenario_word = "scenario=boot";
        let reads = Keys::read_by(Keys::scenario_of(bootargs));
        let own = |key: Keys| if reads.contains(key) { Ok(()) } else { Err(ArgError::NotRead) };
        for (i, word) in bootargs.split_ascii_whitespace().enumerate() {
            *bad = word;
            let (k, v) = word.split_once('=').ok_or(ArgError::NotKeyValue)?;
            let key_of = |w: &'a str| w.split_once('=').map(|(k, _)| k);
            if bootargs.split_ascii_whitespace().take(i).any(|w| key_of(w) == Some(k)) {
                return Err(ArgError::Repeated);
            }
            match k {
                "scenario" => (scenario, scenario_word) = (v, word),
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
                    set.seed = Some(number(k, v, 0, u32::MAX)?);
                }
                "create_us" => {
                    own(Keys::CREATE_US)?;
                    set.create_us = Some(number(k, v, 0, MAX_MODEL_US)?);
                }
                "setup_us" => {
                    own(Keys::SETUP_US)?;
                    set.setup_us = Some(number(k, v, 0, MAX_MODEL_US)?);
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
                "watchdog" => set.watchdog = Some(number(k, v, 0, sched::MAX_WATCHDOG_TICKS)?),
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
                "slice_us" => set.slice_us = Some(number(k, v, 0, arch::MAX_SLICE_US as u32)?),
                "entry_race" => {
                    let on = on_off(v)?;
                    if on && !arch::HAS_ENTRY_RACE {
                        return Err(ArgError::EntryRace);
                    }
                    set.entry_race = Some(on);
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
                "trace" => set.trace = Some(on_off(v)?),
                "barrier" => {
                    own(Keys::BARRIER)?;
                    set.barrier = Some(on_off(v)?);
                }
                "nohz" => nohz = on_off(v)?,
                "idle_yield" => set.idle_yield = Some(on_off(v)?),
                "skew" => skew = on_off(v)?,
                "features" => features = features.parse_list(v).map_err(ArgError::Feature)?,
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
            _ => {
                *bad = scenario_word;
                return Err(ArgError::UnknownScenario);
            }
        };
        *bad = "";
        set.apply();
        Ok(Config { scenario, hz, features, nohz, clusters, capacity, skew })
    }
}

/// The boot line's words that set the kernel's own state rather than the scenario's: held
/// while the line is read, and set only once all of it is accepted (a refused line changes
/// nothing).
#[derive(Default)]
struct Settings {
    seed: Option<u32>,
    create_us: Option<u32>,
    setup_us: Option<u32>,
    watchdog: Option<u32>,
    slice_us: Option<u32>,
    entry_race: Option<bool>,
    trace: Option<bool>,
    barrier: Option<bool>,
    idle_yield: Option<bool>,
}

impl Settings {
    /// Sets what the line gave.
    fn apply(self) {
        if let Some(n) = self.seed {
            SB_SEED.store(n, Relaxed);
        }
        if let Some(us) = self.create_us {
            SB_CREATE_NS.store(us as u64 * 1000, Relaxed);
        }
        if let Some(us) = self.setup_us {
            SB_SETUP_NS.store(us as u64 * 1000, Relaxed);
        }
        if let Some(t) = self.watchdog {
            sched::set_watchdog_ticks(t);
        }
        if let Some(us) = self.slice_us {
            arch::set_slice_us(us as u64);
        }
        if let Some(on) = self.entry_race {
            arch::simulate_entry_race(on);
        }
        if let Some(on) = self.trace {
            sched::set_trace(on);
        }
        if let Some(on) = self.barrier {
            SB_BARRIER.store(on, Relaxed);
        }
        if let Some(on) = self.idle_yield {
            sched::set_idle_exit_yield(on);
        }
    }
}

impl Scenario {
    /// Its name on the boot line.
    pub(super) fn name(&self) -> &'static str {
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
    pub(super) fn threads(&self, ncpus: u32) -> u32 {
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
