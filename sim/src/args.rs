//! `cargo xsim`'s command line: the subcommands and their options, with the checks that
//! turn them into a workload.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use sched_sim::experiments::Workload;
use sched_sim::machine::{DEFAULT_CREATE_NS, DEFAULT_SETUP_NS};

use crate::{config, usage};

#[derive(Parser)]
#[command(
    name = "cargo xsim",
    about = "Experiments with sched-core on a simulated multi-CPU machine",
    args_conflicts_with_subcommands = true,
    subcommand_required = false
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Option<Cmd>,
    #[command(flatten)]
    pub(crate) program: ProgramArgs,
}

/// `cargo xsim --workload FILE`: an rt-app workload file, A against B.
#[derive(clap::Args, Clone)]
pub(crate) struct ProgramArgs {
    /// An rt-app workload file (the subset of docs/workloads.md): its figures per task with
    /// features A and B (by default the seed's rule off and on).
    #[arg(long)]
    pub(crate) workload: Option<PathBuf>,
    /// Features of A on top of `--features`, e.g. "NO_UTIL_EST".
    #[arg(long)]
    pub(crate) a: Option<String>,
    /// Features of B on top of `--features`.
    #[arg(long)]
    pub(crate) b: Option<String>,
    /// Iterations per side.
    #[arg(long, default_value_t = 15)]
    pub(crate) iterations: usize,
    #[command(flatten)]
    pub(crate) m: MachineArgs,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Mode {
    /// Idle CPUs stop their tick and are kicked (nohz).
    Tickless,
    /// Idle CPUs keep ticking and balance themselves.
    Ticking,
}

#[derive(clap::Args, Clone)]
pub(crate) struct MachineArgs {
    /// Number of CPUs (up to 1024).
    #[arg(long, visible_alias = "vcpus", default_value_t = 8)]
    pub(crate) cpus: usize,
    /// Topology: flat, clusters:K, biglittle:CAP (first half LITTLE at CAP, second half big),
    /// numa:K (2 nodes of clusters of K), nodes:N or nodes:N:K (N NUMA nodes, clusters of K
    /// inside each). `cargo xrun --topology` takes the same and builds it in QEMU.
    #[arg(long, default_value = "clusters:4")]
    pub(crate) topology: String,
    /// Tick rate.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u32).range(1..=i64::from(sched_core::smp::MAX_HZ)))]
    pub(crate) hz: u32,
    /// Base seed; iteration i uses the i-th seed derived from it.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Idle-CPU tick mode.
    #[arg(long, value_enum, default_value_t = Mode::Tickless)]
    pub(crate) mode: Mode,
    /// Extra feature switches applied to both sides, e.g. "NO_UTIL_EST".
    #[arg(long, default_value = "")]
    pub(crate) features: String,
    /// A sysbench-like main thread's work before each worker's creation (µs).
    #[arg(long, default_value_t = DEFAULT_CREATE_NS / 1000)]
    pub(crate) create_us: u64,
    /// A sysbench-like worker's set-up before the start barrier (µs).
    #[arg(long, default_value_t = DEFAULT_SETUP_NS / 1000)]
    pub(crate) setup_us: u64,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Folder for pictures: `sysbench`, `ab` and `--workload` write the A/B picture
    /// (sim-ab.svg); `sysbench` and `--workload` on up to 8 CPUs also one run's trace
    /// (sim-trace.json, for Perfetto) and timeline (sim-timeline.svg). `spread` and `groups`
    /// write none and refuse it.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
}

/// The sysbench-like workload and how often to run it.
#[derive(clap::Args, Clone)]
pub(crate) struct SysbenchArgs {
    /// Iterations per side.
    #[arg(long, default_value_t = 15)]
    pub(crate) iterations: usize,
    /// Worker threads.
    #[arg(long, default_value_t = 8)]
    pub(crate) threads: u32,
    /// Events in total.
    #[arg(long, default_value_t = 1000)]
    pub(crate) events: u64,
    /// Work per event (µs).
    #[arg(long, default_value_t = 1240)]
    pub(crate) event_us: u64,
    /// Relative jitter of the work per event (0..=0.5, in whole percent).
    #[arg(long, default_value_t = 0.02)]
    pub(crate) jitter: f64,
}

impl SysbenchArgs {
    /// The workload, or one line (and the usage exit) for a value its file cannot hold.
    pub(crate) fn workload(&self, m: &MachineArgs) -> Workload {
        use sched_workload::limits::{MAX_EVENT_US, MAX_JITTER_PCT, MAX_POOL_EVENTS};
        // (With the main thread.)
        let max_threads = sched_sim::machine::program_room(config(m).cpus) as u32 - 1;
        let why = if !(1..=max_threads).contains(&self.threads) {
            Some(format!("--threads {}: 1..={max_threads}", self.threads))
        } else if !(1..=u64::from(MAX_POOL_EVENTS)).contains(&self.events) {
            Some(format!("--events {}: 1..={MAX_POOL_EVENTS}", self.events))
        } else if !(1..=u64::from(MAX_EVENT_US)).contains(&self.event_us) {
            Some(format!("--event-us {}: 1..={MAX_EVENT_US}", self.event_us))
        } else if !(0.0..=f64::from(MAX_JITTER_PCT) / 100.0).contains(&self.jitter)
            || (self.jitter * 100.0 - (self.jitter * 100.0).round()).abs() > 1e-9
        {
            Some(format!(
                "--jitter {}: 0..={} in whole percent",
                self.jitter,
                f64::from(MAX_JITTER_PCT) / 100.0
            ))
        } else {
            None
        };
        if let Some(why) = why {
            usage(&why)
        }
        Workload::Sysbench {
            threads: self.threads,
            events: self.events,
            cost_ns: self.event_us * 1000,
            jitter: self.jitter,
        }
    }
}

/// Which workload an A/B runs.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum WorkloadKind {
    /// The seed's sysbench-like run (its options above).
    Sysbench,
    /// Spinners plus periodic short-slice tasks: their wake-to-run times and the spinners'
    /// CPU share (the options below).
    Latency,
}

/// The latency workload: spinners plus periodic tasks with short slices.
#[derive(clap::Args, Clone)]
pub(crate) struct LatencyArgs {
    /// Spinners (default slice).
    #[arg(long, default_value_t = 16)]
    pub(crate) spinners: u32,
    /// Periodic tasks (at least 2: the first half has the short slice).
    #[arg(long, default_value_t = 8)]
    pub(crate) periodic: u32,
    /// A periodic task's work per period (µs).
    #[arg(long, default_value_t = 500)]
    pub(crate) run_us: u64,
    /// A periodic task's sleep per period (µs).
    #[arg(long, default_value_t = 4500)]
    pub(crate) sleep_us: u64,
    /// The short slice the first half of the periodic tasks asks for (µs; 0 the default, else
    /// 100..=100000); the others keep the default.
    #[arg(long, default_value_t = 500)]
    pub(crate) slice_us: u64,
    /// How long each run lasts (ms).
    #[arg(long, default_value_t = 2000)]
    pub(crate) duration_ms: u64,
}

/// The option of the workload an A/B does not run that was given a value other than its
/// default, if any, as its flag: such a line asks for something it would not get.
pub(crate) fn unused_option(
    kind: WorkloadKind,
    m: &MachineArgs,
    w: &SysbenchArgs,
    l: &LatencyArgs,
) -> Option<&'static str> {
    #[derive(Parser)]
    struct Defaults {
        #[command(flatten)]
        w: SysbenchArgs,
        #[command(flatten)]
        l: LatencyArgs,
    }
    let d = Defaults::try_parse_from(["defaults"]).expect("every workload option has a default");
    let changed = match kind {
        WorkloadKind::Sysbench => [
            ("--spinners", l.spinners != d.l.spinners),
            ("--periodic", l.periodic != d.l.periodic),
            ("--run-us", l.run_us != d.l.run_us),
            ("--sleep-us", l.sleep_us != d.l.sleep_us),
            ("--slice-us", l.slice_us != d.l.slice_us),
            ("--duration-ms", l.duration_ms != d.l.duration_ms),
        ]
        .to_vec(),
        WorkloadKind::Latency => [
            ("--threads", w.threads != d.w.threads),
            ("--events", w.events != d.w.events),
            ("--event-us", w.event_us != d.w.event_us),
            ("--jitter", w.jitter != d.w.jitter),
            // (The machine's options that only the sysbench-like run's threads read.)
            ("--create-us", m.create_us != DEFAULT_CREATE_NS / 1000),
            ("--setup-us", m.setup_us != DEFAULT_SETUP_NS / 1000),
        ]
        .to_vec(),
    };
    changed.into_iter().find_map(|(flag, differs)| differs.then_some(flag))
}

impl LatencyArgs {
    /// The workload for a machine of `cpus` CPUs, or one line (and the usage exit) for a value
    /// out of range.
    pub(crate) fn workload(&self, cpus: usize) -> Workload {
        // Every task is runnable at once: as many as the runqueues and the task table hold.
        let room = (cpus * sched_sim::machine::SIM_Q).min(sched_sim::machine::SIM_TASKS);
        if self.spinners as usize + self.periodic as usize > room {
            usage(&format!(
                "--spinners {} and --periodic {}: at most {room} tasks in all on {cpus} CPUs",
                self.spinners, self.periodic
            ))
        }
        if self.periodic < 2 {
            usage(&format!(
                "--periodic {}: at least 2 (one with the short slice, one without)",
                self.periodic
            ))
        }
        if self.slice_us != 0
            && sched_core::eevdf::checked_slice_ns(self.slice_us.saturating_mul(1000)).is_none()
        {
            usage(&format!("--slice-us {} is not 0 or within 100..=100000", self.slice_us));
        }
        // The kernel's bounds for the same workload (its boot keys `run_us`, `sleep_us`,
        // `duration_ms`), so that every time stays far from overflow.
        for (flag, v, max) in [
            ("--run-us", self.run_us, 100_000),
            ("--sleep-us", self.sleep_us, 1_000_000),
            ("--duration-ms", self.duration_ms, 60_000),
        ] {
            if !(1..=max).contains(&v) {
                usage(&format!("{flag} {v}: must be 1..={max}"));
            }
        }
        Workload::Latency {
            spinners: self.spinners,
            periodic: self.periodic,
            run_ns: self.run_us.saturating_mul(1000).max(1),
            sleep_ns: self.sleep_us.saturating_mul(1000),
            slice_ns: self.slice_us.saturating_mul(1000),
            duration_ns: self.duration_ms.saturating_mul(1_000_000),
        }
    }
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// The seed's experiment: sysbench-like threads with the seed's rule on and off.
    Sysbench {
        #[command(flatten)]
        m: MachineArgs,
        #[command(flatten)]
        w: SysbenchArgs,
    },
    /// Time to full spread for a fork burst and a wake-all-on-one-CPU burst vs CPU count.
    Spread {
        #[command(flatten)]
        m: MachineArgs,
        /// CPU counts.
        #[arg(long, value_delimiter = ',', default_value = "8,64,256,1024")]
        cpu_counts: Vec<usize>,
        /// Iterations per point.
        #[arg(long, default_value_t = 3)]
        iterations: usize,
    },
    /// Task groups: cgroup v2 weights and cpu.max in the shapes of kselftest's test_cpu.c,
    /// each group's CPU time beside its target.
    Groups {
        #[command(flatten)]
        m: MachineArgs,
        /// Seconds measured per case (after one of warm-up), 1..=60.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
    /// Any feature switch A vs B on a workload (the sysbench-like one, or the latency one),
    /// the same kind of table; e.g. `--workload latency --a "" --b EEVDF`.
    Ab {
        #[command(flatten)]
        m: MachineArgs,
        /// Features of A on top of `--features`, e.g. "NO_UTIL_EST".
        #[arg(long)]
        a: String,
        /// Features of B on top of `--features`.
        #[arg(long)]
        b: String,
        /// The workload.
        #[arg(long, value_enum, default_value_t = WorkloadKind::Sysbench)]
        workload: WorkloadKind,
        #[command(flatten)]
        w: SysbenchArgs,
        #[command(flatten)]
        l: LatencyArgs,
    },
}
