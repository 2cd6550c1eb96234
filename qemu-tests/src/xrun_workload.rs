//! `cargo xrun --workload FILE`: an rt-app workload file as an A/B experiment, on the QEMU
//! kernel and in the simulator: the file lowered (or refused in one line before anything
//! boots), K boots of `scenario=program` per side (each with its own seed, which staggers the
//! threads' creation), and the same per-task table for both platforms.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use sched_core::Features;
use sched_sim::experiments::{ab, program_table, AbTable, Workload};
use sched_sim::machine::{RunReport, TopologyKind};

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
    /// Where the traces and pictures go.
    pub(crate) out: std::path::PathBuf,
    /// Linux beside (`--linux`).
    pub(crate) linux: bool,
    /// Idle CPUs keep ticking (`--ticking`), on the kernel and on Linux.
    pub(crate) ticking: bool,
}

/// `cargo xrun --workload FILE [--a LIST] [--b LIST]`: the sides (by default the seed's rule
/// off and on, on top of `base`), then the experiment.
pub(crate) fn main(file: &Path, s: &Setup, base: Features, a: Option<&str>, b: Option<&str>) -> ExitCode {
    let rule = Features::UTIL_PULL_SKIPS_LONE_TASK;
    let side = |list: Option<&str>, tag: &str, default: (Features, &str)| -> Result<Side, String> {
        match list {
            None => Ok(Side { features: default.0, label: default.1.to_string() }),
            Some(l) => Ok(Side {
                features: base.parse_list(l).map_err(|e| format!("--{tag} {l:?}: {e}"))?,
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
    // What the simulator cannot hold on these CPUs is refused before anything boots.
    let bytes = loaded.def.to_bytes();
    if let Ok(prog) = sched_workload::Program::parse(&bytes) {
        if let Err(e) = sched_sim::machine::check_program(&prog, s.cpus, sched_sim::machine::SIM_Q) {
            eprintln!("xrun: {}", sched_workload::one_line(&format!("{}: {e}", file.display())));
            return ExitCode::from(e.exit_code());
        }
    }
    // What Linux's rt-app cannot run is refused before anything boots.
    let text = std::fs::read_to_string(file).unwrap_or_default();
    if let (true, Err(e)) = (s.linux, sched_workload::rtapp::linux::guest_json(&text)) {
        eprintln!("xrun: {}: {e}", file.display());
        return ExitCode::from(e.exit_code());
    }
    // Linux's parts, fetched (or refused) before the kernel's runs, not after them.
    if s.linux {
        if let Err(line) = crate::linux::Guest::prepare() {
            eprintln!("xrun: {line}");
            return ExitCode::FAILURE;
        }
    }
    let mut machine = match qemu::prepare(s.arch).and_then(|m| m.with_cpus(s.cpus)) {
        Ok(m) => m,
        Err(line) => {
            eprintln!("xrun: {line}");
            return ExitCode::FAILURE;
        }
    };
    machine.numa = s.topology.nodes();
    machine.clusters = s.topology.cluster_size(s.cpus);
    machine.program = Some(loaded.file.path());
    let (mut ra, mut rb) = (Vec::new(), Vec::new());
    // A program with a pool of events is sysbench-like: its boots report the seed's figures.
    let pooled = !loaded.def.pools.is_empty();
    let (mut fa, mut fb) = (Vec::new(), Vec::new());
    for i in 0..s.iterations {
        for (side, out, seed_out) in [(a, &mut ra, &mut fa), (b, &mut rb, &mut fb)] {
            let cmd = format!("scenario=program seed={} {}{}", i + 1, s.boot, feature_arg(side.features));
            eprint!("\rxrun: QEMU {} run {}/{} ({})   ", s.mode.name(), i + 1, s.iterations, side.label);
            let boot = qemu::boot(&machine, &cmd, s.mode, Duration::from_secs(600));
            let seed = if pooled { crate::xrun::figures(&boot) } else { None };
            match figures(&boot, &loaded.def, s.cpus) {
                Some(r) if boot.code == Some(0) && seed.is_some() == pooled => {
                    seed_out.extend(seed);
                    out.push(RunReport {
                        length_ns: r.run_ns,
                        tasks: r.tasks,
                        blocked_threads: r.blocked,
                        migrations: boot.number_after(": migrations ").unwrap_or(0.0) as u64,
                        ..RunReport::default()
                    })
                }
                _ => {
                    crate::xrun::failed_run(&boot, &cmd);
                    return ExitCode::FAILURE;
                }
            }
        }
    }
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
        loaded.threads
    );
    if pooled {
        print!("{}", crate::sysbench_figures::render(&a.label, &b.label, &fa, &fb));
    }
    print!("{}", q.render());
    let w = Workload::program(&name, &loaded.def);
    let t = ab(&s.sim, &w, (a.features, &a.label), (b.features, &b.label), s.iterations, || {});
    println!("\nthe simulator, {} CPUs ({}), workload {name}", s.cpus, s.topology.describe(s.cpus));
    print!("{}", t.render());
    if s.linux {
        if let Err(line) = linux_beside(&machine, s, &name, &text, &loaded.def, [a, b], [&q, &t]) {
            eprintln!("xrun: {line}");
            return ExitCode::FAILURE;
        }
    }
    pictures(&machine, s, a, b, &w, &name);
    if let Some(line) = t.cut_line() {
        eprintln!("xrun: the simulator: {line}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Linux's table for the workload and the realism table: the kernel's (`tables[0]`) and the
/// simulator's (`tables[1]`) medians, sides A and B, over Linux's.
fn linux_beside(
    machine: &qemu::Machine,
    s: &Setup,
    name: &str,
    text: &str,
    def: &sched_workload::ProgramDef,
    [a, b]: [&Side; 2],
    [q, t]: [&AbTable; 2],
) -> Result<(), String> {
    let (reports, heading, domains) =
        crate::xrun_linux::rtapp(machine, s.mode, s.ticking, name, text, def, s.iterations as u32)?;
    let rows = |t: &AbTable, b: bool| -> crate::xrun_linux::Rows {
        t.rows.iter().map(|r| (r.name.clone(), if b { r.b.clone() } else { r.a.clone() })).collect()
    };
    // One side: the table's two columns are the same runs.
    let l = program_table("Linux", "Linux", s.iterations, &reports, &reports);
    let side = crate::xrun_linux::LinuxTable { heading, domains, rows: rows(&l, false) };
    println!();
    crate::xrun_linux::print(&side);
    let (qa, qb, sa, sb) = (rows(q, false), rows(q, true), rows(t, false), rows(t, true));
    let columns = [("kernel, A", &qa), ("kernel, B", &qb), ("sim, A", &sa), ("sim, B", &sb)];
    // (A side given as `--a` is labelled "A: ...".)
    let (la, lb) = (a.label.trim_start_matches("A: "), b.label.trim_start_matches("B: "));
    let legend = format!("kernel = the QEMU kernel, sim = the simulator, A = {la}, B = {lb}");
    println!();
    print!("{}", crate::xrun_linux::realism(&side.rows, &columns, &legend));
    Ok(())
}

/// How much of a run the pictures show from the workload's start (ns): a timeline of
/// seconds would hold more switches than an SVG viewer draws.
const PICTURE_NS: u64 = 300_000_000;

/// One traced run of each side, seed 1, on the kernel and in the simulator: side B's
/// Perfetto traces (the whole run) and timelines, and the A/B pictures (A above B, one time
/// axis; the first [`PICTURE_NS`]), in `--out`.
fn pictures(machine: &qemu::Machine, s: &Setup, a: &Side, b: &Side, w: &Workload, name: &str) {
    let _ = std::fs::create_dir_all(&s.out);
    let write = |file: &str, text: &str| -> Option<String> {
        let p = s.out.join(file);
        crate::xrun_trace::write_file(&p, text).then(|| p.display().to_string())
    };
    let everyone: sched_sim::picture::IsWorker = |_| true;
    let desc = format!("workload {name}, {} vCPUs, {}", s.cpus, s.topology.describe(s.cpus));
    // The kernel: its switch log, with trace=on.
    let traced = |side: &Side| {
        let cmd = format!("scenario=program seed=1 trace=on {}{}", s.boot, feature_arg(side.features));
        let boot = qemu::boot(machine, &cmd, s.mode, Duration::from_secs(600));
        (crate::xrun_trace::qemu_trace(&boot, s.cpus), cmd)
    };
    let ((qa, _), (qb, cmd)) = (traced(a), traced(b));
    if qb.switches.is_empty() {
        println!("no trace of the QEMU run: the traced run logged no context switches");
    } else {
        let start = qb.switches.first().map_or(0, |x| x.time);
        let end = qb.switches.last().map_or(0, |x| x.time).min(start + PICTURE_NS);
        let other = serde_json::json!({ "source": "kernel-shim under QEMU", "arch": s.arch.name(), "command_line": cmd });
        let title = format!("kernel-shim on QEMU {} ({} mode): {cmd}", s.arch.name(), s.mode.name());
        let json = qb.chrome_json(other);
        if let (Some(j), Some(v)) = (
            write("workload-qemu-trace.json", &json),
            write("workload-qemu-timeline.svg", &qb.svg(&title, start, end)),
        ) {
            println!("trace of one QEMU run ({}): {j} (open in ui.perfetto.dev), timeline: {v}", b.label);
        }
        let check = crate::xrun_trace::check_qemu_trace(&qb, &json);
        println!("trace check of the QEMU trace: {}", sched_sim::trace_check::verdict(&check));
        let from = qa.switches.iter().chain(&qb.switches).map(|x| x.time).min().unwrap_or(0);
        let to = qa
            .switches
            .iter()
            .chain(&qb.switches)
            .map(|x| x.time)
            .max()
            .unwrap_or(from)
            .min(from + PICTURE_NS);
        let svg = sched_sim::picture::ab_svg(
            &format!("kernel-shim on QEMU {} ({} mode), seed 1: {desc}", s.arch.name(), s.mode.name()),
            &sched_sim::picture::Side { label: &a.label, log: &qa },
            &sched_sim::picture::Side { label: &b.label, log: &qb },
            from,
            to,
            everyone,
        );
        if let Some(p) = write("workload-qemu-ab.svg", &svg) {
            println!("A/B picture of the QEMU runs: {p}");
        }
    }
    // The simulator.
    let run = |f: Features| {
        sched_sim::experiments::traced_run(&sched_sim::Config { features: f, ..s.sim.clone() }, w)
    };
    if let (Some(ta), Some(tb)) = (run(a.features), run(b.features)) {
        if let (Some(j), Some(v)) =
            (write("workload-sim-trace.json", &tb.json), write("workload-sim-timeline.svg", &tb.svg))
        {
            println!("trace of one simulated run ({}): {j}, timeline: {v}", b.label);
        }
        let (from, to) = (ta.window.0, ta.window.1.max(tb.window.1).min(ta.window.0 + PICTURE_NS));
        let svg = sched_sim::picture::ab_svg(
            &format!("the simulator, seed 1: {desc}"),
            &sched_sim::picture::Side { label: &a.label, log: &ta.log },
            &sched_sim::picture::Side { label: &b.label, log: &tb.log },
            from,
            to,
            everyone,
        );
        if let Some(p) = write("workload-sim-ab.svg", &svg) {
            println!("A/B picture of the simulated runs: {p}");
        }
    }
}

/// ` features=...` for a side, or nothing for the defaults.
fn feature_arg(f: Features) -> String {
    let words = feature_words(f);
    if words.is_empty() {
        String::new()
    } else {
        format!(" features={words}")
    }
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
