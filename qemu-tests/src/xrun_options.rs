//! `cargo xrun`'s options: what each asks for, their defaults, and the checks that refuse a
//! bad combination in one line before anything runs (the kernel's own limits included, so
//! that no boot line the kernel would refuse is built).

use std::path::PathBuf;

use clap::Parser;
use sched_core::Features;
use sched_sim::machine::TopologyKind;
use sched_workload::limits::MAX_MODEL_US;

use crate::qemu::{self, Mode};

#[derive(Parser)]
#[command(name = "cargo xrun", about = "The seed's experiment on the QEMU kernel and in the simulator")]
pub(crate) struct Args {
    /// Iterations per side (each with its own workload seed; not given: 15). Not with --groups.
    #[arg(long)]
    pub(crate) iterations: Option<usize>,
    /// Worker threads of the sysbench-like run (not given: 8; on a microcontroller 6).
    #[arg(long)]
    pub(crate) threads: Option<u32>,
    /// Events in total of the sysbench-like run (not given: 1000).
    #[arg(long)]
    pub(crate) events: Option<u32>,
    /// Tick rate (100, 250, 300, 1000).
    #[arg(long, default_value_t = 250)]
    pub(crate) hz: u32,
    /// QEMU mode: deterministic (icount, byte-identical but for a rare race on a loaded host) or parallel (multi-threaded TCG).
    #[arg(long, default_value = "deterministic")]
    pub(crate) mode: String,
    /// The machine's topology, as `cargo xsim --topology` takes it: flat (one cluster, what
    /// Linux builds on QEMU virt), clusters:K (K dividing the vCPUs; clusters:4 on 8 = the
    /// seed's 2x4), biglittle:CAP (two clusters, the first LITTLE of capacity CAP), nodes:N or
    /// nodes:N:K (N NUMA nodes, clusters of K inside each), numa:K (= nodes:2:K). QEMU
    /// describes it in the device tree (`-smp` clusters in the cpu-map on aarch64, `-numa`
    /// nodes); the kernel reads it from there, riscv64's clusters and big.LITTLE capacities
    /// from the boot line. The simulator builds the same machine.
    #[arg(long, default_value = "clusters:4")]
    pub(crate) topology: String,
    /// The main thread's work before each worker's creation (µs), in the sysbench file both
    /// halves run (not given: 30). On a microcontroller, which runs the kernel's own sysbench,
    /// the kernel's `create_us=` (not given: as fast as it creates threads).
    #[arg(long)]
    pub(crate) create_us: Option<u32>,
    /// Each worker's set-up before the start barrier (µs), in the sysbench file both halves
    /// run (not given: 20). On a microcontroller the kernel's `setup_us=` (not given: seeded
    /// 0..112 µs).
    #[arg(long)]
    pub(crate) setup_us: Option<u32>,
    /// Keep the tick on idle CPUs (default: idle CPUs go tickless and busy CPUs kick an idle
    /// balancer, as Linux's NO_HZ_IDLE does).
    #[arg(long)]
    pub(crate) ticking: bool,
    /// Extra feature switches for both sides (e.g. NO_UTIL_EST).
    #[arg(long, default_value = "")]
    pub(crate) features: String,
    /// Where the traces, pictures and stories go (not given: target/xrun); created before
    /// anything runs. Not with --groups, which writes none.
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// The QEMU machine: aarch64 or riscv64 `virt`, or a microcontroller board (cortex-m4: 1
    /// CPU, cortex-m33: 2; both need --ticking).
    #[arg(long, default_value = "aarch64")]
    pub(crate) arch: String,
    /// vCPUs (QEMU's -smp), 1..=64 on the virt boards; the simulator gets as many CPUs.
    /// Deterministic mode takes longer as they grow.
    /// (Default: 8 on the virt boards, the board's cores on a microcontroller.)
    #[arg(long)]
    pub(crate) vcpus: Option<u32>,
    /// An rt-app workload file instead of the sysbench-like run (docs/workloads.md): A against
    /// B (`--a`, `--b`; by default the seed's rule off and on) on the kernel and in the
    /// simulator, rt-app's figures per task.
    #[arg(long, value_name = "FILE")]
    pub(crate) workload: Option<PathBuf>,
    /// With --workload: side A's feature switches on top of --features (e.g. "" or EEVDF).
    #[arg(long)]
    pub(crate) a: Option<String>,
    /// With --workload: side B's feature switches on top of --features.
    #[arg(long)]
    pub(crate) b: Option<String>,
    /// Real Linux beside: Debian's arm64 kernel boots on the same QEMU machine (vCPUs,
    /// clusters, NUMA nodes, mode), runs the same workload (sysbench, or rt-app for
    /// --workload) with ftrace's sched events, and its figures are printed beside the kernel's
    /// and the simulator's, with a realism table. aarch64 only; the packages are fetched once
    /// into target/linux.
    #[arg(long)]
    pub(crate) linux: bool,
    /// Task groups instead of sysbench: kselftest test_cpu.c's shapes (cpu.weight 50, 100,
    /// 150 over- and under-provisioned, a nested hierarchy, 40 threads against one, cpu.max
    /// at 10 % of a CPU) and LTP cfs_bandwidth01's churn, --seconds each (each round of the
    /// kernel's nested case too), the kernel's `scenario=groups` beside the simulator's
    /// `cargo xsim groups`, and with --linux Linux's cgroup v2 on the same machine.
    #[arg(long)]
    pub(crate) groups: bool,
    /// With --groups: how long each case runs (s), 1..=30 (not given: 10, as kselftest's).
    #[arg(long)]
    pub(crate) seconds: Option<u32>,
}

impl Args {
    /// The kernel's `nohz=` for the tick choice: `off` with `--ticking`.
    pub(crate) fn nohz(&self) -> &'static str {
        if self.ticking {
            "off"
        } else {
            "on"
        }
    }

    /// The tick choice, as the tables' headings say it.
    pub(crate) fn idle_ticks(&self) -> &'static str {
        if self.ticking {
            "idle CPUs ticking"
        } else {
            "tickless idle"
        }
    }

    /// The vCPU count (`check` fills in the machine's default).
    pub(crate) fn cpus(&self) -> u32 {
        self.vcpus.unwrap_or(8)
    }

    /// Worker threads (`check` fills in the machine's default).
    pub(crate) fn threads(&self) -> u32 {
        self.threads.unwrap_or(8)
    }

    /// Events in total.
    pub(crate) fn events(&self) -> u32 {
        self.events.unwrap_or(1000)
    }

    /// Iterations per side.
    pub(crate) fn iterations(&self) -> usize {
        self.iterations.unwrap_or(15)
    }

    /// Where the outputs go.
    pub(crate) fn out(&self) -> PathBuf {
        self.out.clone().unwrap_or_else(|| PathBuf::from("target/xrun"))
    }
}

/// The kernel's sysbench limits (`MAX_SPINNERS`, `MAX_EVENTS` of its 64-bit build) and HZ
/// choices: checked here so that a bad option is one line before anything runs.
const MAX_THREADS: u32 = 56;
const MAX_EVENTS: u32 = 65_536;
const HZ_CHOICES: [u32; 4] = [100, 250, 300, 1000];
/// The same limits of the microcontroller build.
const MCU_MAX_THREADS: u32 = 6;
const MCU_MAX_EVENTS: u32 = 4096;

/// What the options ask for, checked: the machine, the QEMU mode and the feature switches
/// both halves run with (the seed's rule aside). `Err` is one line for the user.
pub(crate) fn check(a: &mut Args) -> Result<(qemu::Arch, Mode, Features, TopologyKind), String> {
    let arch = qemu::Arch::parse(&a.arch)?;
    let mode = match a.mode.as_str() {
        "deterministic" => Mode::Deterministic,
        "parallel" => Mode::Parallel,
        m => return Err(format!("--mode {m}: deterministic or parallel")),
    };
    let max = arch.max_cpus() as u32;
    let vcpus = *a.vcpus.get_or_insert(if max == arch.cpus() as u32 { max } else { 8 });
    if vcpus == 0 || vcpus > max || (max == arch.cpus() as u32 && vcpus != max) {
        let range = if max == arch.cpus() as u32 { format!("{max}") } else { format!("1..={max}") };
        return Err(format!("--vcpus {vcpus}: the {} machine takes {range}", arch.name()));
    }
    // Options a mode does not read are refused, not ignored.
    let given = |v: bool, name: &'static str| if v { Some(name) } else { None };
    let sysbench_only = [
        given(a.threads.is_some(), "--threads"),
        given(a.events.is_some(), "--events"),
        given(a.create_us.is_some(), "--create-us"),
        given(a.setup_us.is_some(), "--setup-us"),
    ];
    if a.workload.is_some() {
        if let Some(name) = sysbench_only.iter().flatten().next() {
            return Err(format!("{name} is for the sysbench-like run: a workload file says its own"));
        }
    }
    if a.groups {
        let not_groups = [given(a.iterations.is_some(), "--iterations"), given(a.out.is_some(), "--out")];
        if let Some(name) = sysbench_only.iter().chain(&not_groups).flatten().next() {
            return Err(format!("{name} is not for --groups, which runs its own cases"));
        }
    }
    if (a.a.is_some() || a.b.is_some()) && a.workload.is_none() {
        return Err(
            "--a and --b are for --workload (the sysbench-like run is the seed's rule off and on)".into()
        );
    }
    let (threads, events) = match arch {
        qemu::Arch::CortexM4 | qemu::Arch::CortexM33 => (MCU_MAX_THREADS, MCU_MAX_EVENTS),
        _ => (MAX_THREADS, MAX_EVENTS),
    };
    let n = *a.threads.get_or_insert(8.min(threads));
    if n == 0 || n > threads {
        return Err(format!("--threads {n}: 1..={threads}"));
    }
    if a.events() == 0 || a.events() > events {
        return Err(format!("--events {}: 1..={events}", a.events()));
    }
    if !HZ_CHOICES.contains(&a.hz) {
        return Err(format!("--hz {}: one of 100, 250, 300, 1000", a.hz));
    }
    let topology = TopologyKind::parse(&a.topology)
        .ok_or_else(|| format!("--topology {}: not one of {}", a.topology, TopologyKind::GRAMMAR))?;
    topology.check(vcpus as usize).map_err(|why| format!("--topology {}: {why}", a.topology))?;
    let virt = arch.virt();
    if !virt && a.groups {
        return Err(format!(
            "--groups --arch {}: a microcontroller's kernel has no task groups",
            arch.name()
        ));
    }
    if !virt && (topology.nodes() > 1 || topology.capacities(vcpus as usize).is_some()) {
        return Err(format!("--topology {}: NUMA nodes and big.LITTLE need a virt board", a.topology));
    }
    for (name, v) in [("--create-us", a.create_us), ("--setup-us", a.setup_us)] {
        if v.is_some_and(|us| us > MAX_MODEL_US) {
            return Err(format!("{name} {}: 0..={MAX_MODEL_US}", v.unwrap_or(0)));
        }
    }
    if a.iterations() == 0 {
        return Err("--iterations 0: at least 1".into());
    }
    if let Some(why) = crate::linux::refuses(arch).filter(|_| a.linux) {
        return Err(why);
    }
    if a.groups && a.workload.is_some() {
        return Err("--groups runs its own groups: it takes no --workload".into());
    }
    // The kernel's groups run three spinners per CPU at once.
    let pool = crate::workload::kernel_thread_room();
    if a.groups && 3 * u64::from(vcpus) > pool {
        return Err(format!(
            "--groups --vcpus {vcpus}: the kernel's groups run 3 spinners per CPU in {pool} threads, at most {} vCPUs",
            pool / 3
        ));
    }
    match a.seconds {
        Some(_) if !a.groups => return Err("--seconds is for --groups".into()),
        Some(s) if !(1..=30).contains(&s) => return Err(format!("--seconds {s}: 1..=30")),
        _ => {}
    }
    if !a.ticking && matches!(arch, qemu::Arch::CortexM4 | qemu::Arch::CortexM33) {
        return Err(format!("--arch {}: its tick cannot stop; add --ticking", arch.name()));
    }
    // One word at a time, so the line can name the word it does not know.
    let mut features = Features::default();
    let words: Vec<&str> = a.features.split([',', ' ']).filter(|w| !w.is_empty()).collect();
    for word in &words {
        features = features.parse_list(word).map_err(|_| format!("--features: unknown switch {word:?}"))?;
    }
    // The kernel's `features=` is one boot word: commas only; it refuses a switch named
    // twice, so the list is refused here before anything boots.
    a.features = words.join(",");
    Features::default().parse_list(&a.features).map_err(|e| format!("--features {:?}: {e}", a.features))?;
    Ok((arch, mode, features, topology))
}

/// The simulator's machine for the same experiment: as many CPUs, the same topology, HZ,
/// tickless choice and feature switches.
pub(crate) fn sim_config(a: &Args, features: Features, topology: TopologyKind) -> sched_sim::Config {
    sched_sim::Config {
        cpus: a.cpus() as usize,
        topology,
        hz: a.hz,
        nohz: !a.ticking,
        features,
        create_ns: a.create_us.map_or(sched_sim::machine::DEFAULT_CREATE_NS, |us| us as u64 * 1000),
        setup_ns: a.setup_us.map_or(sched_sim::machine::DEFAULT_SETUP_NS, |us| us as u64 * 1000),
        ..sched_sim::Config::octo(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{const_u64, rust_const_nth};

    const SCENARIO: &str = include_str!("../../kernel-shim/src/scenario.rs");
    const SCHED: &str = include_str!("../../kernel-shim/src/sched/mod.rs");
    const ARCH: &str = include_str!("../../kernel-shim/src/arch/mod.rs");

    /// The options are refused exactly where the kernel would refuse the boot line, and the
    /// vCPU counts are the kernel's builds'.
    #[test]
    fn the_limits_checked_are_the_kernels() {
        assert_eq!(const_u64(SCENARIO, "MAX_SPINNERS", 0), MAX_THREADS as u64);
        assert_eq!(const_u64(SCENARIO, "MAX_EVENTS", 0), MAX_EVENTS as u64);
        assert_eq!(const_u64(SCENARIO, "MAX_SPINNERS", 1), MCU_MAX_THREADS as u64);
        assert_eq!(const_u64(SCENARIO, "MAX_EVENTS", 1), MCU_MAX_EVENTS as u64);
        let hz = rust_const_nth(SCHED, "HZ_CHOICES", 0).expect("the kernel's HZ choices");
        assert_eq!(hz, format!("{HZ_CHOICES:?}"));
        // MAX_CPUS: the 8-CPU build, the wide build, the Cortex-M4, the dual Cortex-M33.
        let cpus = |arch: qemu::Arch| arch.cpus() as u64;
        assert_eq!(const_u64(ARCH, "MAX_CPUS", 0), cpus(qemu::Arch::Aarch64));
        assert_eq!(const_u64(ARCH, "MAX_CPUS", 1), qemu::Arch::Riscv64.max_cpus() as u64);
        assert_eq!(const_u64(ARCH, "MAX_CPUS", 2), cpus(qemu::Arch::CortexM4));
        assert_eq!(const_u64(ARCH, "MAX_CPUS", 3), cpus(qemu::Arch::CortexM33));
    }

    #[test]
    fn bad_options_are_refused_with_one_line() {
        let parse = |line: &str| {
            let mut a = Args::try_parse_from(std::iter::once("xrun").chain(line.split_whitespace())).unwrap();
            check(&mut a).err()
        };
        assert_eq!(parse(""), None, "the defaults run");
        assert_eq!(parse("--vcpus 4 --threads 4"), None);
        assert_eq!(parse("--vcpus 16 --threads 24 --topology nodes:2"), None);
        assert_eq!(parse("--topology biglittle:446"), None);
        assert_eq!(parse("--topology nodes:2:2"), None);
        assert_eq!(parse("--linux --vcpus 16 --topology nodes:2"), None, "Linux runs on any virt shape");
        assert_eq!(parse("--arch cortex-m4 --ticking"), None, "a microcontroller's defaults run");
        assert_eq!(parse("--workload f.json --a EEVDF --iterations 3"), None);
        assert_eq!(parse("--groups --seconds 2 --vcpus 4"), None);
        assert_eq!(parse("--groups --vcpus 21 --topology flat"), None, "3 spinners per CPU fit 63 threads");
        for bad in [
            "--threads 0",
            "--vcpus 0",
            "--vcpus 65",
            "--topology clusters:3",
            "--topology clusters:0",
            "--topology biglittle:0",
            "--topology biglittle:abc",
            "--topology flat:2",
            "--vcpus 3 --topology biglittle",
            "--topology rings",
            "--hz 7",
            "--features NO_SUCH_SWITCH",
            "--topology nodes:3",
            "--arch cortex-m33 --ticking --topology biglittle:446",
            "--arch cortex-m4",
            "--events 0",
            "--linux --arch riscv64",
            "--linux --arch cortex-m33 --ticking",
            // Options the chosen mode would not read.
            "--a EEVDF",
            "--b NO_UTIL_EST",
            "--workload f.json --threads 4",
            "--workload f.json --create-us 10",
            "--groups --iterations 3",
            "--groups --out target/elsewhere",
            "--groups --events 100",
            "--groups --vcpus 22 --topology flat",
            "--groups --arch cortex-m4 --ticking",
        ] {
            let why = parse(bad).unwrap_or_else(|| panic!("{bad} was accepted"));
            assert!(!why.contains('\n'), "{bad}: more than one line: {why}");
        }
    }
}
