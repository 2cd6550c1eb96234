//! `cargo xrun`: the seed's experiment. The sysbench-like workload runs on the kernel under
//! QEMU (aarch64 `virt`, or riscv64 with `--arch riscv64`; 8 vCPUs) K times with the seed's
//! rule on and K times off, from the same image, and the seed-style table is printed; then the simulator's table (where CPUs truly run in
//! parallel) beside it, and a trace and SVG of one run, with the trace checked by
//! [`sched_sim::trace_check`]. The options are in `xrun_options.rs`, the traced runs in
//! `xrun_trace.rs`.

use std::process::ExitCode;
use std::time::Duration;

use sched_core::Features;
use sched_sim::machine::TopologyKind;
use sched_workload::sysbench::Sysbench;

use crate::qemu::{self, Boot, Mode};
use crate::sysbench_figures::{Figures, ROWS};
use crate::xrun_options::{check, sim_config, Args};

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
    // The rule is this run's side: a `--features` word naming it is overridden here, as the
    // simulator's sides override it (the kernel refuses a list that names a switch twice).
    let extra: String = a
        .features
        .split(',')
        .filter(|w| {
            !w.is_empty()
                && Features::switch(w).map_or(true, |(f, _)| f != Features::UTIL_PULL_SKIPS_LONE_TASK)
        })
        .map(|w| format!("{w},"))
        .collect();
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
            a.nohz(),
            if trace { " trace=on" } else { "" }
        );
    }
    format!(
        "scenario=sysbench threads={} events={} hz={} nohz={} seed={seed}{}{capacity}{model} features={extra}{flag}",
        a.threads(),
        a.events(),
        a.hz,
        a.nohz(),
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
            boot: format!("hz={} nohz={}{}", a.hz, a.nohz(), capacity_word(topology, a.cpus() as usize)),
            sim: sim_config(&a, features, topology),
            out: a.out(),
            linux: a.linux,
            ticking: a.ticking,
        };
        return crate::xrun_workload::main(&file, &setup, features, a.a.as_deref(), a.b.as_deref());
    }
    let machine = match machine_for(&a, arch, topology) {
        Ok(m) => m,
        Err(line) => {
            eprintln!("xrun: {line}");
            return ExitCode::FAILURE;
        }
    };
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
    sysbench(&a, machine, mode, features, topology)
}

/// The kernel's machine for the options: the board's QEMU and kernel (the wide build above 8
/// vCPUs), with the topology's NUMA nodes and clusters. `Err` is one line for the user.
fn machine_for(a: &Args, arch: qemu::Arch, topology: TopologyKind) -> Result<qemu::Machine, String> {
    let mut machine = qemu::prepare(arch)?.with_cpus(a.cpus() as usize)?;
    machine.numa = topology.nodes();
    machine.clusters = topology.cluster_size(a.cpus() as usize);
    Ok(machine)
}

/// The seed's experiment: the QEMU runs, their table, Linux's beside them with `--linux`, the
/// simulator's table, then the traced runs and pictures.
fn sysbench(
    a: &Args,
    mut machine: qemu::Machine,
    mode: Mode,
    features: Features,
    topology: TopologyKind,
) -> ExitCode {
    // Linux's parts, fetched (or refused) before the kernel's runs, not after them.
    if a.linux {
        if let Err(line) = crate::linux::Guest::prepare() {
            eprintln!("xrun: {line}");
            return ExitCode::FAILURE;
        }
    }
    // The workload: the simulator's sysbench file, which the kernel runs too where it takes a
    // program.
    let cfg = sim_config(a, features, topology);
    let workload = match sched_sim::Workload::seed() {
        sched_sim::Workload::Sysbench { cost_ns, jitter, .. } => {
            sched_sim::Workload::Sysbench { threads: a.threads(), events: a.events() as u64, cost_ns, jitter }
        }
        w => w,
    };
    let shape = workload.sysbench(&cfg).expect("a sysbench workload");
    let kernel_shape = kernel_sysbench(shape, a.cpus(), mode);
    let arch = machine.arch;
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
    let x = Experiment { a, mode, topology, file, machine: &machine };
    let (on, off) = match x.qemu_runs() {
        Ok(sides) => sides,
        Err(failed) => {
            let (b, cmd) = *failed;
            failed_run(&b, &cmd);
            return ExitCode::FAILURE;
        }
    };
    eprintln!();
    x.print_setup(&shape, &kernel_shape);
    if let Err(line) = x.tables(&on, &off, &cfg, &workload) {
        eprintln!("xrun: {line}");
        return ExitCode::FAILURE;
    }
    let traced = crate::xrun_trace::traced_runs(&crate::xrun_trace::Traced {
        machine: &machine,
        mode,
        on_cmd: sysbench_cmd(a, topology, 1, true, true, file),
        off_cmd: sysbench_cmd(a, topology, 1, true, false, file),
        desc: format!(
            "{} threads, {} events, {} vCPUs, {}, HZ={}, {}",
            a.threads(),
            a.events(),
            a.cpus(),
            topology.describe(a.cpus() as usize),
            a.hz,
            a.idle_ticks()
        ),
        out: a.out(),
        file,
        cfg: &cfg,
        workload: &workload,
        features,
    });
    if let Err(line) = traced {
        eprintln!("xrun: {line}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Says that boot `b` of `cmd` failed: how it ended, what QEMU said if it said anything, and
/// the log's last lines in order.
pub(crate) fn failed_run(b: &Boot, cmd: &str) {
    let how = if b.timed_out { "timed out".to_string() } else { format!("exit {:?}", b.code) };
    eprintln!("\nxrun: run failed ({how}): {cmd}");
    if let Some(said) = &b.qemu_said {
        eprintln!("  QEMU said: {said}");
    }
    if let Some(said) = &b.firmware_said {
        eprintln!("  the firmware said, before the kernel: {said}");
    }
    for l in &b.lines[b.lines.len().saturating_sub(8)..] {
        eprintln!("  {l}");
    }
}

/// A boot that failed and its command line.
type FailedRun = (Boot, String);

/// What the experiment's steps share.
struct Experiment<'a> {
    a: &'a Args,
    mode: Mode,
    topology: TopologyKind,
    /// The kernel runs the simulator's sysbench file (its machine takes a program).
    file: bool,
    machine: &'a qemu::Machine,
}

impl Experiment<'_> {
    /// Boots the kernel's runs and reads their figures: (rule on, rule off), or the failed
    /// boot and its command line.
    fn qemu_runs(&self) -> Result<(Vec<Figures>, Vec<Figures>), Box<FailedRun>> {
        let Experiment { a, mode, topology, file, machine, .. } = *self;
        // Each iteration's rule-on and rule-off boots, in that order, deterministic ones side by
        // side ([`crate::pool`]). After a failed run no new boot starts: the experiment stops there.
        let runs: Vec<(u64, bool)> =
            (0..a.iterations()).flat_map(|i| [(1 + i as u64, true), (1 + i as u64, false)]).collect();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let boot = |k: usize| {
            let (seed, rule) = runs[k];
            let cmd = sysbench_cmd(a, topology, seed, false, rule, file);
            let go = !stop.load(std::sync::atomic::Ordering::Relaxed);
            go.then(|| (qemu::boot(machine, &cmd, mode, Duration::from_secs(120)), cmd))
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
        match failed {
            Some(f) => Err(Box::new(f)),
            None => Ok((on, off)),
        }
    }

    /// The lines that say what ran: the machine, the workload, and what its figures can show.
    fn print_setup(&self, shape: &Sysbench, kernel_shape: &Sysbench) {
        let Experiment { a, mode, topology, file, machine } = *self;
        let arch = machine.arch;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        println!(
            "QEMU {}, {} vCPUs, {} mode, HZ={} ({}), scheduler topology {}: sysbench-like, {} threads, {} events, {} iterations per side",
            arch.name(),
            a.cpus(),
            mode.name(),
            a.hz,
            a.idle_ticks(),
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
    }

    /// The QEMU table, Linux's with `--linux`, the simulator's, and with Linux the realism
    /// table of the three. `Err`: Linux's side failed, one line.
    fn tables(
        &self,
        on: &[Figures],
        off: &[Figures],
        cfg: &sched_sim::Config,
        workload: &sched_sim::Workload,
    ) -> Result<(), String> {
        let Experiment { a, mode, topology, machine, .. } = *self;
        print!(
            "{}",
            crate::sysbench_figures::render("without rule (pre-patch)", "with rule (c32b4308)", off, on)
        );
        println!("(median [min–max]; an instant never reached counts as the whole run, a spread with all its migrations)");
        let linux = if a.linux {
            match crate::xrun_linux::sysbench(
                machine,
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
                Err(line) => return Err(line),
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
            a.idle_ticks(),
            a.threads(),
            a.events()
        );
        let t = sched_sim::ab(
            cfg,
            workload,
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
            let (ko, kn, so, sn) = (kernel(off), kernel(on), sim(false), sim(true));
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn features_reach_the_kernel_as_one_boot_word() {
        let mut a = Args::try_parse_from(["xrun", "--features", "NO_UTIL_EST  EEVDF,"]).unwrap();
        let (.., topology) = check(&mut a).expect("known switches");
        let line = sysbench_cmd(&a, topology, 1, false, true, true);
        assert!(line.ends_with(" features=NO_UTIL_EST,EEVDF,UTIL_PULL_SKIPS_LONE_TASK"), "{line}");
    }

    /// `--features` naming the seed's rule is overridden by each side, not sent beside the
    /// side's own word (the kernel refuses a switch named twice).
    #[test]
    fn the_rule_is_each_sides_own_even_when_features_name_it() {
        let mut a =
            Args::try_parse_from(["xrun", "--features", "NO_UTIL_PULL_SKIPS_LONE_TASK,NO_UTIL_EST"]).unwrap();
        let (.., topology) = check(&mut a).expect("known switches");
        for (rule, word) in [(true, "UTIL_PULL_SKIPS_LONE_TASK"), (false, "NO_UTIL_PULL_SKIPS_LONE_TASK")] {
            let line = sysbench_cmd(&a, topology, 1, false, rule, false);
            let features = line.rsplit(" features=").next().unwrap();
            assert_eq!(features, format!("NO_UTIL_EST,{word}"), "{line}");
            assert!(sched_core::Features::default().parse_list(features).is_ok(), "{line}");
        }
    }
}
