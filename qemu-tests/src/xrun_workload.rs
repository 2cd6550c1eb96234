//! `cargo xrun --workload FILE`: an rt-app workload file as an A/B experiment, on the QEMU
//! kernel and in the simulator: the file lowered (or refused in one line before anything
//! boots), K boots of `scenario=program` per side (each with its own seed, which staggers the
//! threads' creation), and the same per-task table for both platforms.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use sched_core::Features;
use sched_sim::experiments::{ab, program_table, Workload};
use sched_sim::machine::{RunReport, TopologyKind};
use sched_workload::Program;

use crate::qemu::{self, Arch, Mode};
use crate::workload::{figures, load};

/// One side of the A/B: its features and label.
struct Side {
    features: Features,
    label: String,
}

/// What the experiment runs on, checked by `cargo xrun`'s option check.
pub(crate) struct Setup {
    pub(crate) arch: Arch,
    pub(crate) mode: Mode,
    pub(crate) topology: TopologyKind,
    pub(crate) cpus: usize,
    pub(crate) iterations: usize,
    /// The kernel's boot words for the machine's shape (clusters, capacities, HZ, nohz).
    pub(crate) boot: String,
    pub(crate) sim: sched_sim::Config,
}

/// `cargo xrun --workload FILE [--a LIST] [--b LIST]`: the sides (by default the seed's rule
/// off and on, on top of `base`), then the experiment.
pub(crate) fn main(file: &Path, s: &Setup, base: Features, a: Option<&str>, b: Option<&str>) -> ExitCode {
    let rule = Features::UTIL_PULL_SKIPS_LONE_TASK;
    let side = |list: Option<&str>, tag: &str, default: (Features, &str)| -> Result<Side, String> {
        match list {
            None => Ok(Side { features: default.0, label: default.1.to_string() }),
            Some(l) => Ok(Side {
                features: base.parse_list(l).map_err(|_| format!("--{tag} {l:?}: an unknown switch"))?,
                label: format!("{}: {}", tag.to_uppercase(), if l.is_empty() { "the defaults" } else { l }),
            }),
        }
    };
    match (
        side(a, "a", (base - rule, "without rule (pre-patch)")),
        side(b, "b", (base | rule, "with rule (c32b4308)")),
    ) {
        (Ok(sa), Ok(sb)) => run(file, s, &sa, &sb),
        (Err(line), _) | (_, Err(line)) => {
            eprintln!("xrun: {line}");
            ExitCode::from(2)
        }
    }
}

/// Runs `file` with A and B on the kernel and in the simulator, and prints both tables.
fn run(file: &Path, s: &Setup, a: &Side, b: &Side) -> ExitCode {
    let loaded = match load(file, s.arch) {
        Ok(l) => l,
        Err((code, why)) => {
            eprintln!("xrun: {why}");
            return ExitCode::from(code);
        }
    };
    let mut machine = match qemu::prepare(s.arch).and_then(|m| m.with_cpus(s.cpus)) {
        Ok(m) => m,
        Err(line) => {
            eprintln!("xrun: {line}");
            return ExitCode::FAILURE;
        }
    };
    machine.numa = s.topology.nodes();
    machine.clusters = s.topology.cluster_size(s.cpus);
    machine.program = Some(loaded.bytes_file.clone());
    let (mut ra, mut rb) = (Vec::new(), Vec::new());
    for i in 0..s.iterations {
        for (side, out) in [(a, &mut ra), (b, &mut rb)] {
            let features = feature_words(side.features);
            let features = if features.is_empty() { String::new() } else { format!(" features={features}") };
            let cmd = format!("scenario=program seed={} {}{features}", i + 1, s.boot);
            eprint!("\rxrun: QEMU {} run {}/{} ({})   ", s.mode.name(), i + 1, s.iterations, side.label);
            let boot = qemu::boot(&machine, &cmd, s.mode, Duration::from_secs(600));
            match figures(&boot, &loaded.def, s.cpus) {
                Some(r) if boot.code == Some(0) => out.push(RunReport {
                    total_ns: r.run_ns,
                    tasks: r.tasks,
                    blocked_threads: r.blocked,
                    migrations: boot.number_after(": migrations ").unwrap_or(f64::NAN) as u64,
                    ..RunReport::default()
                }),
                _ => {
                    let _ = std::fs::remove_file(&loaded.bytes_file);
                    eprintln!("\nxrun: run failed (exit {:?}): {cmd}", boot.code);
                    for l in boot.lines.iter().rev().take(8) {
                        eprintln!("  {l}");
                    }
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    let _ = std::fs::remove_file(&loaded.bytes_file);
    eprintln!();
    let name =
        file.file_name().map_or_else(|| file.display().to_string(), |n| n.to_string_lossy().into_owned());
    let q = program_table(&a.label, &b.label, s.iterations, &ra, &rb);
    println!(
        "QEMU {}, {} vCPUs, {} mode, workload {name} ({} tasks, {} threads)",
        s.arch.name(),
        s.cpus,
        s.mode.name(),
        loaded.def.tasks.len(),
        loaded.def.tasks.iter().map(|t| t.instances).sum::<u32>()
    );
    print!("{}", q.render());
    let bytes: &'static [u8] = Box::leak(loaded.def.to_bytes().into_boxed_slice());
    let program = Program::parse(bytes).expect("a lowered program parses");
    let w = Workload::Program { name: name.clone(), program };
    let t = ab(&s.sim, &w, (a.features, &a.label), (b.features, &b.label), s.iterations, || {});
    println!("\nthe simulator, {} CPUs ({}), workload {name}", s.cpus, s.topology.describe(s.cpus));
    print!("{}", t.render());
    ExitCode::SUCCESS
}

/// Features as the kernel's boot line takes them: each switch that differs from the defaults,
/// on or `NO_` off.
fn feature_words(f: Features) -> String {
    let d = Features::default();
    Features::all()
        .iter_names()
        .filter(|&(_, flag)| f.contains(flag) != d.contains(flag))
        .map(|(name, flag)| if f.contains(flag) { name.to_string() } else { format!("NO_{name}") })
        .collect::<Vec<_>>()
        .join(",")
}
