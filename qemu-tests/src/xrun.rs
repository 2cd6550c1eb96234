//! `cargo xrun`: the seed's experiment. The sysbench-like workload runs on the kernel under
//! QEMU (aarch64 `virt`, or riscv64 with `--arch riscv64`; 8 vCPUs) K times with the seed's
//! rule on and K times off, from the same image, and the seed-style table is printed; then the simulator's table (where CPUs truly run in
//! parallel) beside it, and a trace and SVG of one run, with the trace checked by
//! [`sched_sim::trace_check`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use sched_core::Features;
use sched_sim::trace_check::{check_chrome_trace, verdict};

use sched_sim::machine::TopologyKind;

use crate::qemu::{self, Boot, Mode};
use crate::sysbench_figures::{Figures, ROWS};
use sched_workload::limits::MAX_MODEL_US;
use sched_workload::sysbench::Sysbench;

#[derive(Parser)]
#[command(name = "cargo xrun", about = "The seed's experiment on the QEMU kernel and in the simulator")]
struct Args {
    /// Iterations per side (each with its own workload seed; not given: 15). Not with --groups.
    #[arg(long)]
    iterations: Option<usize>,
    /// Worker threads of the sysbench-like run (not given: 8; on a microcontroller 6).
    #[arg(long)]
    threads: Option<u32>,
    /// Events in total of the sysbench-like run (not given: 1000).
    #[arg(long)]
    events: Option<u32>,
    /// Tick rate (100, 250, 300, 1000).
    #[arg(long, default_value_t = 250)]
    hz: u32,
    /// QEMU mode: deterministic (icount, byte-identical) or parallel (multi-threaded TCG).
    #[arg(long, default_value = "deterministic")]
    mode: String,
    /// The machine's topology, as `cargo xsim --topology` takes it: flat (one cluster, what
    /// Linux builds on QEMU virt), clusters:K (K dividing the vCPUs; clusters:4 on 8 = the
    /// seed's 2x4), biglittle:CAP (two clusters, the first LITTLE of capacity CAP), nodes:N or
    /// nodes:N:K (N NUMA nodes, clusters of K inside each), numa:K (= nodes:2:K). QEMU
    /// describes it in the device tree (`-smp` clusters in the cpu-map on aarch64, `-numa`
    /// nodes); the kernel reads it from there, riscv64's clusters and big.LITTLE capacities
    /// from the boot line. The simulator builds the same machine.
    #[arg(long, default_value = "clusters:4")]
    topology: String,
    /// The main thread's work before each worker's creation (µs), in the sysbench file both
    /// halves run (not given: 30). On a microcontroller, which runs the kernel's own sysbench,
    /// the kernel's `create_us=` (not given: as fast as it creates threads).
    #[arg(long)]
    create_us: Option<u32>,
    /// Each worker's set-up before the start barrier (µs), in the sysbench file both halves
    /// run (not given: 20). On a microcontroller the kernel's `setup_us=` (not given: seeded
    /// 0..112 µs).
    #[arg(long)]
    setup_us: Option<u32>,
    /// Keep the tick on idle CPUs (default: idle CPUs go tickless and busy CPUs kick an idle
    /// balancer, as Linux's NO_HZ_IDLE does).
    #[arg(long)]
    ticking: bool,
    /// Extra feature switches for both sides (e.g. NO_UTIL_EST).
    #[arg(long, default_value = "")]
    features: String,
    /// Where the traces, pictures and stories go (not given: target/xrun); created before
    /// anything runs. Not with --groups, which writes none.
    #[arg(long)]
    out: Option<PathBuf>,
    /// The QEMU machine: aarch64 or riscv64 `virt`, or a microcontroller board (cortex-m4: 1
    /// CPU, cortex-m33: 2; both need --ticking).
    #[arg(long, default_value = "aarch64")]
    arch: String,
    /// vCPUs (QEMU's -smp), 1..=64 on the virt boards; the simulator gets as many CPUs.
    /// Deterministic mode takes longer as they grow.
    /// (Default: 8 on the virt boards, the board's cores on a microcontroller.)
    #[arg(long)]
    vcpus: Option<u32>,
    /// An rt-app workload file instead of the sysbench-like run (docs/workloads.md): A against
    /// B (`--a`, `--b`; by default the seed's rule off and on) on the kernel and in the
    /// simulator, rt-app's figures per task.
    #[arg(long, value_name = "FILE")]
    workload: Option<PathBuf>,
    /// With --workload: side A's feature switches on top of --features (e.g. "" or EEVDF).
    #[arg(long)]
    a: Option<String>,
    /// With --workload: side B's feature switches on top of --features.
    #[arg(long)]
    b: Option<String>,
    /// Real Linux beside: Debian's arm64 kernel boots on the same QEMU machine (vCPUs,
    /// clusters, NUMA nodes, mode), runs the same workload (sysbench, or rt-app for
    /// --workload) with ftrace's sched events, and its figures are printed beside the kernel's
    /// and the simulator's, with a realism table. aarch64 only; the packages are fetched once
    /// into target/linux.
    #[arg(long)]
    linux: bool,
    /// Task groups instead of sysbench: kselftest test_cpu.c's shapes (cpu.weight 50, 100,
    /// 150 over- and under-provisioned, a nested hierarchy, 40 threads against one, cpu.max
    /// at 10 % of a CPU) and LTP cfs_bandwidth01's churn, --seconds each, the kernel's
    /// `scenario=groups` beside the simulator's `cargo xsim groups`, and with --linux
    /// Linux's cgroup v2 on the same machine.
    #[arg(long)]
    groups: bool,
    /// With --groups: how long each case runs (s), 1..=30 (not given: 10, as kselftest's).
    #[arg(long)]
    seconds: Option<u32>,
}

impl Args {
    /// The vCPU count (`check` fills in the machine's default).
    fn cpus(&self) -> u32 {
        self.vcpus.unwrap_or(8)
    }

    /// Worker threads (`check` fills in the machine's default).
    fn threads(&self) -> u32 {
        self.threads.unwrap_or(8)
    }

    /// Events in total.
    fn events(&self) -> u32 {
        self.events.unwrap_or(1000)
    }

    /// Iterations per side.
    fn iterations(&self) -> usize {
        self.iterations.unwrap_or(15)
    }

    /// Where the outputs go.
    fn out(&self) -> PathBuf {
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
fn check(a: &mut Args) -> Result<(qemu::Arch, Mode, Features, TopologyKind), String> {
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
    // The kernel's `features=` is one boot word: commas only.
    a.features = words.join(",");
    Ok((arch, mode, features, topology))
}

/// The simulator's machine for the same experiment: as many CPUs, the same topology, HZ,
/// tickless choice and feature switches.
fn sim_config(a: &Args, features: Features, topology: TopologyKind) -> sched_sim::Config {
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

/// The seed-style figures of a boot that ran a sysbench workload (the kernel's own, or a
/// workload program with a pool); `None` if it failed or reported none.
pub(crate) fn figures(b: &Boot) -> Option<Figures> {
    if b.code != Some(0) {
        return None;
    }
    let us = |k: &str| b.number_after(k).map(|v| v / 1000.0);
    let failed: f64 = b
        .lines
        .iter()
        .filter(|l| l.contains("balance outcomes"))
        .map(|l| {
            ["nothing detachable", "all pinned", "active balance"]
                .iter()
                .filter_map(|k| {
                    let rest = &l[l.find(k)? + k.len()..];
                    rest.split_whitespace().next()?.parse::<f64>().ok()
                })
                .sum::<f64>()
        })
        .sum();
    Some(Figures {
        total_ms: us("total time")?,
        avg_ms: us(" avg ")?,
        max_ms: us(" max ")?,
        // A spread never reached is censored at the run's end, with all its migrations.
        spread_ms: us("spread time").or_else(|| us("total time"))?,
        // Not reported with more workers than CPUs, where it is the spread instant.
        one_per_cpu_ms: match us("one-per-CPU time") {
            Some(ms) => ms,
            None if b.line("one-per-CPU never").is_some() => us("total time")?,
            None => us("spread time").or_else(|| us("total time"))?,
        },
        migrations: b
            .line("spread time")
            .and_then(|l| {
                let i = l.find("), ")? + 3;
                l[i..].split_whitespace().next()?.parse().ok()
            })
            .or_else(|| b.number_after(": migrations "))
            .unwrap_or(f64::NAN),
        failed,
    })
}

/// The kernel command line of one run: the workload (the loaded sysbench file, or on a
/// machine that takes no program the kernel's own sysbench), seed, optional switch tracing,
/// the features with the seed's rule switched on or off, and the CPUs' capacities if they
/// differ (QEMU has no way to give them). The clusters and nodes are the machine's (see
/// [`qemu::Machine`]).
fn sysbench_cmd(a: &Args, topology: TopologyKind, seed: u64, trace: bool, rule: bool, file: bool) -> String {
    let extra = if a.features.is_empty() { String::new() } else { format!("{},", a.features) };
    let flag = if rule { "UTIL_PULL_SKIPS_LONE_TASK" } else { "NO_UTIL_PULL_SKIPS_LONE_TASK" };
    let capacity = capacity_word(topology, a.cpus() as usize);
    let model = [("create_us", a.create_us), ("setup_us", a.setup_us)]
        .iter()
        .filter_map(|(k, v)| v.map(|us| format!(" {k}={us}")))
        .collect::<String>();
    if file {
        return format!(
            "scenario=program hz={} nohz={} seed={seed}{}{capacity} features={extra}{flag}",
            a.hz,
            if a.ticking { "off" } else { "on" },
            if trace { " trace=on" } else { "" }
        );
    }
    format!(
        "scenario=sysbench threads={} events={} hz={} nohz={} seed={seed}{}{capacity}{model} features={extra}{flag}",
        a.threads(),
        a.events(),
        a.hz,
        if a.ticking { "off" } else { "on" },
        if trace { " trace=on" } else { "" }
    )
}

/// The kernel's copy of the sysbench shape `s` on `vcpus` vCPUs: in deterministic mode QEMU
/// runs the vCPUs in turn on one instruction clock, so a `run` of N µs lasts N µs times the
/// busy vCPUs in guest time. The kernel's events get the work divided by the vCPUs the
/// workers keep busy, so that an event lasts about as long as the simulator's; in parallel
/// mode the host sets the pace and the shape is kept.
fn kernel_sysbench(s: Sysbench, vcpus: u32, mode: Mode) -> Sysbench {
    match mode {
        Mode::Deterministic => Sysbench { event_us: (s.event_us / s.threads.min(vcpus).max(1)).max(1), ..s },
        Mode::Parallel => s,
    }
}

/// The boot word ` capacity=…` of a topology whose CPUs differ in capacity on `cpus` CPUs
/// (QEMU has no way to give them), or nothing.
fn capacity_word(topology: TopologyKind, cpus: usize) -> String {
    topology.capacities(cpus).map_or(String::new(), |c| format!(" capacity={}", capacity_list(&c)))
}

/// Capacities as the kernel's `capacity=` takes them, runs of one value as `value*count`.
fn capacity_list(caps: &[u64]) -> String {
    let mut runs: Vec<(u64, usize)> = Vec::new();
    for &c in caps {
        match runs.last_mut() {
            Some((v, n)) if *v == c => *n += 1,
            _ => runs.push((c, 1)),
        }
    }
    let words: Vec<String> =
        runs.iter().map(|&(v, n)| if n == 1 { v.to_string() } else { format!("{v}*{n}") }).collect();
    words.join(",")
}

pub fn main(args: &[String]) -> ExitCode {
    let mut a = match sched_sim::cli::parse::<Args>("cargo xrun", args) {
        Ok(a) => a,
        Err(code) => return ExitCode::from(code),
    };
    let (arch, mode, features, topology) = match check(&mut a) {
        Ok(c) => c,
        Err(line) => {
            eprintln!("xrun: {line}");
            return ExitCode::from(2);
        }
    };
    // The outputs' folder exists before anything runs, or the run is refused.
    if !a.groups {
        if let Err(e) = std::fs::create_dir_all(a.out()) {
            eprintln!("xrun: --out {}: {e}", a.out().display());
            return ExitCode::from(2);
        }
    }
    if let Some(file) = a.workload.clone() {
        let setup = crate::xrun_workload::Setup {
            arch,
            mode,
            topology,
            cpus: a.cpus() as usize,
            iterations: a.iterations(),
            boot: format!(
                "hz={} nohz={}{}",
                a.hz,
                if a.ticking { "off" } else { "on" },
                capacity_word(topology, a.cpus() as usize)
            ),
            sim: sim_config(&a, features, topology),
            out: a.out(),
            linux: a.linux,
            ticking: a.ticking,
        };
        return crate::xrun_workload::main(&file, &setup, features, a.a.as_deref(), a.b.as_deref());
    }
    let mut machine = match qemu::prepare(arch) {
        Ok(p) => p,
        Err(line) => {
            eprintln!("xrun: {line}");
            return ExitCode::FAILURE;
        }
    };
    machine = match machine.with_cpus(a.cpus() as usize) {
        Ok(m) => m,
        Err(line) => {
            eprintln!("xrun: {line}");
            return ExitCode::FAILURE;
        }
    };
    machine.numa = topology.nodes();
    machine.clusters = topology.cluster_size(a.cpus() as usize);
    if a.groups {
        let cfg = sim_config(&a, features, topology);
        let seconds = a.seconds.unwrap_or(10);
        // The kernel gets the switches and capacities the simulator's machine has.
        let words = format!(
            "hz={}{}{}",
            a.hz,
            if a.features.is_empty() { String::new() } else { format!(" features={}", a.features) },
            capacity_word(topology, a.cpus() as usize)
        );
        return match crate::xrun_groups::main(&machine, mode, a.ticking, a.linux, seconds, &words, &cfg) {
            Ok(()) => ExitCode::SUCCESS,
            Err(line) => {
                eprintln!("xrun: {line}");
                ExitCode::FAILURE
            }
        };
    }
    // The workload: the simulator's sysbench file, which the kernel runs too where it takes a
    // program.
    let cfg = sim_config(&a, features, topology);
    let workload = match sched_sim::Workload::seed() {
        sched_sim::Workload::Sysbench { cost_ns, jitter, .. } => {
            sched_sim::Workload::Sysbench { threads: a.threads(), events: a.events() as u64, cost_ns, jitter }
        }
        w => w,
    };
    let shape = workload.sysbench(&cfg).expect("a sysbench workload");
    let kernel_shape = kernel_sysbench(shape, a.cpus(), mode);
    let file = arch.program_window().is_some();
    // Kept until the boots are done: dropping it removes the file.
    let program = file.then(|| {
        let def = sched_workload::rtapp::lower(&kernel_shape.json()).expect("every sysbench shape lowers");
        crate::workload::load_def(def, "the sysbench file", arch)
    });
    let program = match program.transpose() {
        Ok(p) => p,
        Err((code, line)) => {
            eprintln!("xrun: {line}");
            return ExitCode::from(code);
        }
    };
    machine.program = program.as_ref().map(|l| l.file.path());
    // Each iteration's rule-on and rule-off boots, in that order, deterministic ones side by
    // side ([`crate::pool`]). After a failed run no new boot starts: the experiment stops there.
    let runs: Vec<(u64, bool)> =
        (0..a.iterations()).flat_map(|i| [(1 + i as u64, true), (1 + i as u64, false)]).collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let boot = |k: usize| {
        let (seed, rule) = runs[k];
        let cmd = sysbench_cmd(&a, topology, seed, false, rule, file);
        let go = !stop.load(std::sync::atomic::Ordering::Relaxed);
        go.then(|| (qemu::boot(&machine, &cmd, mode, Duration::from_secs(120)), cmd))
    };
    let (mut on, mut off) = (Vec::new(), Vec::new());
    let mut failed = None;
    crate::pool::in_order(mode, runs.len(), boot, |k, run| {
        let ((b, cmd), (seed, rule)) = match run {
            Some(r) if failed.is_none() => (r, runs[k]),
            _ => return,
        };
        eprint!(
            "\rxrun: QEMU {} run {}/{} (rule {})   ",
            mode.name(),
            seed,
            a.iterations(),
            if rule { "on" } else { "off" }
        );
        match figures(&b) {
            Some(f) => (if rule { &mut on } else { &mut off }).push(f),
            None => {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                failed = Some((b, cmd));
            }
        }
    });
    if let Some((b, cmd)) = failed {
        eprintln!("\nxrun: run failed (exit {:?}): {cmd}", b.code);
        for l in b.lines.iter().rev().take(8) {
            eprintln!("  {l}");
        }
        return ExitCode::FAILURE;
    }
    eprintln!();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "QEMU {}, {} vCPUs, {} mode, HZ={} ({}), scheduler topology {}: sysbench-like, {} threads, {} events, {} iterations per side",
        arch.name(),
        a.cpus(),
        mode.name(),
        a.hz,
        if a.ticking { "idle CPUs ticking" } else { "tickless idle" },
        topology.describe(a.cpus() as usize),
        a.threads(),
        a.events(),
        a.iterations()
    );
    if file {
        println!(
            "The workload: the simulator's sysbench file (workloads/sysbench.json's shape; {} µs of work before each worker's creation, {} µs of set-up), the kernel's events {} µs of work{}",
            kernel_shape.create_us,
            kernel_shape.setup_us,
            kernel_shape.event_us,
            if kernel_shape == shape {
                ".".to_string()
            } else {
                format!(" (the simulator's {} µs over the {} vCPUs the workers keep busy: deterministic mode runs them in turn on one clock).", shape.event_us, a.threads().min(a.cpus()))
            }
        );
    } else {
        println!("The workload: the kernel's own sysbench ({} takes no workload program).", arch.name());
    }
    println!(
        "These are scheduler-level figures: deterministic mode counts all vCPUs' instructions in one guest clock, and parallel mode is bounded by this host's {cores} cores, so neither can show a throughput gain from spreading. The throughput view is the simulator's, below."
    );
    print!(
        "{}",
        crate::sysbench_figures::render("without rule (pre-patch)", "with rule (c32b4308)", &off, &on)
    );
    println!("(median [min–max]; an instant never reached counts as the whole run, a spread with all its migrations)");
    let linux = if a.linux {
        match crate::xrun_linux::sysbench(
            &machine,
            mode,
            a.ticking,
            a.threads(),
            a.events(),
            a.iterations() as u32,
        ) {
            Ok(side) => {
                println!();
                crate::xrun_linux::print(&side);
                Some(side)
            }
            Err(line) => {
                eprintln!("xrun: {line}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    println!();
    println!(
        "The simulator (sched-sim: {} CPUs, {}, HZ={}, {}; CPUs truly parallel in virtual time), the same workload ({} threads, {} events):",
        a.cpus(),
        topology.describe(a.cpus() as usize),
        a.hz,
        if a.ticking { "idle CPUs ticking" } else { "tickless idle" },
        a.threads(),
        a.events()
    );
    let t = sched_sim::ab(
        &cfg,
        &workload,
        (cfg.features - Features::UTIL_PULL_SKIPS_LONE_TASK, "without rule (pre-patch)"),
        (cfg.features | Features::UTIL_PULL_SKIPS_LONE_TASK, "with rule (c32b4308)"),
        a.iterations(),
        || {},
    );
    print!("{}", t.render());
    if let Some(side) = &linux {
        let kernel = |v: &[Figures]| -> crate::xrun_linux::Rows {
            ROWS.iter().map(|(n, get)| (n.to_string(), v.iter().map(get).collect())).collect()
        };
        let sim = |b: bool| -> crate::xrun_linux::Rows {
            t.rows.iter().map(|r| (r.name.clone(), if b { r.b.clone() } else { r.a.clone() })).collect()
        };
        let (ko, kn, so, sn) = (kernel(&off), kernel(&on), sim(false), sim(true));
        println!();
        print!(
            "{}",
            crate::xrun_linux::realism(
                &side.rows,
                &[("kernel, off", &ko), ("kernel, on", &kn), ("sim, off", &so), ("sim, on", &sn)],
                "kernel = the QEMU kernel above, sim = the simulator, off / on = the seed's rule"
            )
        );
    }
    // A trace of one QEMU run (rule on, first seed) from the kernel's switch log.
    let cmd = sysbench_cmd(&a, topology, 1, true, true, file);
    let b = qemu::boot(&machine, &cmd, mode, Duration::from_secs(120));
    let log = qemu_trace(&b, machine.cpus);
    if log.switches.is_empty() {
        println!("no trace of the QEMU run: the traced run logged no context switches (exit {:?})", b.code);
    } else {
        let end = log.switches.last().map_or(0, |s| s.time);
        let other = serde_json::json!({ "source": "kernel-shim under QEMU", "arch": arch.name(), "command_line": cmd, "mode": mode.name() });
        let (j, s) = (a.out().join("qemu-trace.json"), a.out().join("qemu-timeline.svg"));
        let svg =
            log.svg(&format!("kernel-shim on QEMU {} ({} mode): {cmd}", arch.name(), mode.name()), 0, end);
        let json = log.chrome_json(other);
        if std::fs::write(&j, &json).is_ok() && std::fs::write(&s, svg).is_ok() {
            println!(
                "trace of one QEMU run (rule on): {} (open in ui.perfetto.dev), timeline: {}",
                j.display(),
                s.display()
            );
        }
        // Every vCPU must show up as a scheduling track (docs/trace-formats.md).
        let check = check_chrome_trace(&json, a.cpus() as usize);
        println!("trace check (sched_sim::trace_check) of the QEMU trace: {}", verdict(&check));
    }
    // The A/B pictures: rule off above rule on, the same seed, one time axis.
    let desc = format!(
        "{} threads, {} events, {} vCPUs, {}, HZ={}, {}",
        a.threads(),
        a.events(),
        a.cpus(),
        topology.describe(a.cpus() as usize),
        a.hz,
        if a.ticking { "idle CPUs ticking" } else { "tickless idle" }
    );
    let off_cmd = sysbench_cmd(&a, topology, 1, true, false, file);
    let off = qemu_trace(&qemu::boot(&machine, &off_cmd, mode, Duration::from_secs(120)), machine.cpus);
    let from = log.switches.iter().chain(&off.switches).map(|s| s.time).min().unwrap_or(0);
    let to = log.switches.iter().chain(&off.switches).map(|s| s.time).max().unwrap_or(from);
    let window = sched_sim::picture::window;
    // The kernel's main thread is the first thread (slot 0); running the file, the file's main
    // thread (sysbench's) is the second; the workers are the others.
    let qemu_worker: sched_sim::picture::IsWorker =
        if file { |n| n != "thread0" && n != "thread1" } else { |n| n != "thread0" };
    let spreads = [&off, &log].map(|l| sched_sim::picture::spread_instant(l, qemu_worker));
    let svg = sched_sim::picture::ab_svg(
        &format!("kernel-shim on QEMU {} ({} mode), seed 1: {desc}", arch.name(), mode.name()),
        &sched_sim::picture::Side { label: "without the rule (pre-patch)", log: &off },
        &sched_sim::picture::Side { label: "with the rule (c32b4308)", log: &log },
        from,
        window(spreads, from, to),
        qemu_worker,
    );
    let sim = sched_sim::picture::sim_ab(
        &cfg,
        &workload,
        (features - Features::UTIL_PULL_SKIPS_LONE_TASK, "without the rule (pre-patch)"),
        (features | Features::UTIL_PULL_SKIPS_LONE_TASK, "with the rule (c32b4308)"),
        &format!("the simulator, seed 1: {desc}"),
    );
    let (sim_svg, sim_on) = match sim {
        Some((svg, on)) => (Some(svg), Some(on)),
        None => (None, None),
    };
    let (qa, sa) = (a.out().join("qemu-ab.svg"), a.out().join("sim-ab.svg"));
    if std::fs::write(&qa, svg).is_ok() && sim_svg.is_some_and(|s| std::fs::write(&sa, s).is_ok()) {
        println!("A/B pictures (rule off above rule on, seed 1): {} and {}", qa.display(), sa.display());
    }
    // Worker by worker, the QEMU run and the simulated run (rule on, seed 1) side by side.
    if let Some(on) = &sim_on {
        let text = format!(
            "{}\n{}",
            sched_sim::story::table(
                "QEMU (rule on, seed 1): each worker's creation, first run, block at the barrier, wakeup, next run (ms, CPU)",
                &sched_sim::story::stories(&log, qemu_worker)
            ),
            sched_sim::story::table(
                "the simulator (rule on, seed 1), the same",
                &sched_sim::story::stories(&on.log, sched_sim::picture::sim_worker)
            )
        );
        print!("\n{text}");
        let _ = std::fs::write(a.out().join("stories.txt"), &text);
    }
    // And the simulated run of the same machine and workload, rule on, as trace files.
    if let Some(on) = sim_on {
        let (j, s) = (a.out().join("sim-trace.json"), a.out().join("sim-timeline.svg"));
        if std::fs::write(&j, on.json).is_ok() && std::fs::write(&s, on.svg).is_ok() {
            println!("trace of one simulated run (rule on): {} , timeline: {}", j.display(), s.display());
        }
    }
    ExitCode::SUCCESS
}

/// Builds a trace from the kernel's `trace: switch cpu=C t=NS prev=P state=S next=N` lines
/// (pid = thread slot + 1, 0 = idle; state R/S/X as a byte) and its `trace: waking` lines.
pub(crate) fn qemu_trace(b: &Boot, cpus: usize) -> sched_sim::trace::TraceLog {
    let mut log = sched_sim::trace::TraceLog::new(cpus);
    for l in &b.lines {
        let woken = l.split("trace: waking ").nth(1);
        if let Some(rest) = woken.or_else(|| l.split("trace: new ").nth(1)) {
            // `waking cpu=C t=NS pid=P`: a wakeup of P onto C; `new ...`: P created there.
            let f: Vec<u64> = rest
                .split_whitespace()
                .take(3)
                .map(|kv| kv.split_once('=').and_then(|(_, v)| v.parse().ok()).unwrap_or(0))
                .collect();
            if let [cpu, t, pid] = f[..] {
                if pid > 0 {
                    let id = sched_core::TaskId::new(pid as u32 - 1, 0);
                    log.waking(t, cpu as usize, id, &format!("thread{}", pid - 1));
                }
            }
            continue;
        }
        if let Some(rest) = l.split("trace: balance-failed ").nth(1) {
            // `balance-failed cpu=C t=NS`: CPU C's balance attempt moved nothing.
            let f: Vec<u64> =
                rest.split_whitespace().take(2).filter_map(|kv| kv.split_once('=')?.1.parse().ok()).collect();
            if let [cpu, t] = f[..] {
                log.balance_failed(t, cpu as usize);
            }
            continue;
        }
        let Some(rest) = l.split("trace: switch ").nth(1) else { continue };
        let mut f = [0u64; 5];
        for (i, kv) in rest.split_whitespace().take(5).enumerate() {
            f[i] = kv.split_once('=').and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
        }
        let [cpu, t, prev, state, next] = f;
        let id = |pid: u64| (pid > 0).then(|| sched_core::TaskId::new(pid as u32 - 1, 0));
        let name = |pid: u64| (pid > 0).then(|| format!("thread{}", pid - 1));
        let st = match state as u8 {
            b'S' => Some(sched_core::TaskState::Blocked),
            b'X' => Some(sched_core::TaskState::Exiting),
            _ => Some(sched_core::TaskState::Runnable),
        };
        log.switch(t, cpu as usize, id(prev), name(prev), id(next), name(next), Some(st));
    }
    log
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

    #[test]
    fn features_reach_the_kernel_as_one_boot_word() {
        let mut a = Args::try_parse_from(["xrun", "--features", "NO_UTIL_EST  EEVDF,"]).unwrap();
        let (.., topology) = check(&mut a).expect("known switches");
        let line = sysbench_cmd(&a, topology, 1, false, true, true);
        assert!(line.ends_with(" features=NO_UTIL_EST,EEVDF,UTIL_PULL_SKIPS_LONE_TASK"), "{line}");
    }
}
