//! `cargo xsim`: experiments on the simulated machine.
#![deny(unsafe_code)]

use indicatif::{ProgressBar, ProgressStyle};
use sched_core::Features;
use sched_sim::experiments::{ab, drive, on_big_stack, spread, Workload};
use sched_sim::machine::{Config, Machine, TopologyKind};
use sched_workload::limits::MAX_MODEL_US;

mod args;

use args::{Cli, Cmd, MachineArgs, Mode, ProgramArgs, WorkloadKind};

/// `list` applied on top of `base` (a side of an A/B on top of `--features`), or one line
/// and the usage exit for an unknown name or a switch named twice.
fn features_on(base: Features, list: &str) -> Features {
    base.parse_list(list).unwrap_or_else(|e| match e {
        sched_core::FeatureListError::Unknown => {
            let known: Vec<_> = Features::all().iter_names().map(|(name, _)| name).collect();
            usage(&format!("unknown feature in {list:?}; known (NO_ turns one off): {}", known.join(", ")))
        }
        sched_core::FeatureListError::Twice => usage(&format!("{list:?}: {e}")),
    })
}

/// Refuses the command line: `why` in one line, then the usage exit.
fn usage(why: &str) -> ! {
    eprintln!("xsim: {}", sched_workload::one_line(why));
    std::process::exit(sched_sim::cli::USAGE_EXIT.into())
}

/// The most iterations a side one command runs.
const MAX_ITERATIONS: usize = 10_000;

/// Refuses (one line, the usage exit) a count of iterations that runs nothing, or more than
/// [`MAX_ITERATIONS`].
fn check_iterations(flag: &str, n: usize) {
    if n == 0 || n > MAX_ITERATIONS {
        usage(&format!("{flag} {n}: must be 1..={MAX_ITERATIONS}"));
    }
}

/// Writes `text` to `path`, or says in one line why not and exits as a failed run does (the
/// experiment ran, its output could not be kept).
fn write_out(path: &std::path::Path, text: &str) {
    let made = path.parent().map_or(Ok(()), std::fs::create_dir_all);
    if let Err(e) = made.and_then(|()| std::fs::write(path, text)) {
        eprintln!("xsim: cannot write {}: {e}", path.display());
        std::process::exit(1)
    }
}

/// Refuses (one line, the usage exit) a CPU count the simulator cannot build with
/// `topology`; `flag` names the option it came from.
fn check_cpus(flag: &str, cpus: usize, topology: TopologyKind, spelled: &str) {
    if cpus == 0 || cpus > 1024 {
        usage(&format!("{flag} {cpus}: must be 1..=1024"))
    }
    if let Err(why) = topology.check(cpus) {
        usage(&format!("--topology {spelled} with {flag} {cpus}: {why}"))
    }
}

fn config(m: &MachineArgs) -> Config {
    let cfg = machine_config(m);
    check_cpus("--cpus", m.cpus, cfg.topology, &m.topology);
    cfg
}

/// [`config`] without the check of `--cpus` against the topology: for `spread`, whose CPU
/// counts are its own (`--cpu-counts`, each checked).
fn machine_config(m: &MachineArgs) -> Config {
    let topology = TopologyKind::parse(&m.topology).unwrap_or_else(|| {
        usage(&format!("--topology {}: not one of {}", m.topology, TopologyKind::GRAMMAR))
    });
    // (Made only when a picture is written, so that a refused command leaves nothing behind;
    // a folder below a file could never be made, and is refused now.)
    if let Some(dir) = &m.out {
        if let Some(file) = dir.ancestors().find(|a| a.exists()).filter(|a| !a.is_dir()) {
            usage(&format!("--out {}: cannot create it: {} is not a folder", dir.display(), file.display()));
        }
    }
    for (flag, us) in [("--create-us", m.create_us), ("--setup-us", m.setup_us)] {
        if us > u64::from(MAX_MODEL_US) {
            usage(&format!("{flag} {us}: must be 0..={MAX_MODEL_US}"))
        }
    }
    Config {
        cpus: m.cpus,
        topology,
        hz: m.hz,
        features: features_on(Features::default(), &m.features),
        nohz: matches!(m.mode, Mode::Tickless),
        seed: m.seed,
        create_ns: m.create_us.saturating_mul(1000),
        setup_ns: m.setup_us.saturating_mul(1000),
        ..Config::octo(m.seed)
    }
}

/// An A/B side's label: its switches on top of `base` (`--features`), or "the defaults".
fn side_label(side: &str, base: &str, list: &str) -> String {
    let both = [base.trim(), list.trim()].into_iter().filter(|l| !l.is_empty()).collect::<Vec<_>>();
    format!("{side}: {}", if both.is_empty() { "the defaults".to_string() } else { both.join(", ") })
}

/// Refuses `--out` (one line, the usage exit) for an experiment that writes no pictures.
fn no_out(m: &MachineArgs, experiment: &str) {
    if m.out.is_some() {
        usage(&format!("{experiment} writes no pictures; --out is for sysbench, ab and --workload"))
    }
}

fn bar(n: u64) -> ProgressBar {
    let pb = ProgressBar::new(n);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} runs {elapsed}")
            .unwrap_or(ProgressStyle::default_bar()),
    );
    pb
}

/// An A/B run of K iterations per side with a progress bar.
fn run_ab(
    cfg: &Config,
    w: &Workload,
    a: (Features, &str),
    b: (Features, &str),
    iterations: usize,
    label: &'static str,
) -> sched_sim::AbTable {
    check_iterations("--iterations", iterations);
    let pb = bar(2 * iterations as u64);
    pb.set_message(label);
    let t = ab(cfg, w, a, b, iterations, || pb.inc(1));
    pb.finish_and_clear();
    if let Some(line) = t.cut_line() {
        eprintln!("xsim: {line}");
        RUNS_CUT.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    t
}

/// A run was cut at the bound ([`run_ab`] said so): the command ends as a failed run, after
/// its table.
static RUNS_CUT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn write_trace(m: &MachineArgs, cfg: &Config, w: &Workload) {
    let Some(dir) = &m.out else { return };
    let cfg = Config { trace: true, ..cfg.clone() };
    let w2 = w.clone();
    let traced = on_big_stack(move || {
        let mut mach = Machine::<8>::new(cfg).expect("valid topology");
        drive(&mut mach, &w2).1
    });
    if let Some((json, svg)) = traced {
        let (j, s) = (dir.join("sim-trace.json"), dir.join("sim-timeline.svg"));
        write_out(&j, &json);
        write_out(&s, &svg);
        eprintln!("xsim: wrote {} (open in ui.perfetto.dev) and {}", j.display(), s.display());
    }
}

/// Writes the A/B picture (side A above side B, seed `cfg.seed`, one time axis) of the
/// experiment into `--out`, if given.
fn write_ab_picture(m: &MachineArgs, cfg: &Config, w: &Workload, a: (Features, &str), b: (Features, &str)) {
    let Some(dir) = &m.out else { return };
    let desc = match w {
        Workload::Sysbench { threads, events, .. } => format!("{threads} threads, {events} events"),
        Workload::Program { name, .. } => name.clone(),
        other => format!("{other:?}"),
    };
    let title = format!(
        "the simulator, seed {}: {desc}, {} CPUs, {}, HZ={}, {}",
        cfg.seed,
        cfg.cpus,
        cfg.topology.describe(cfg.cpus),
        cfg.hz,
        if cfg.nohz { "tickless idle" } else { "idle CPUs ticking" }
    );
    let (cfg, w, a, b) = (cfg.clone(), w.clone(), (a.0, a.1.to_string()), (b.0, b.1.to_string()));
    let svg = on_big_stack(move || {
        sched_sim::picture::sim_ab(&cfg, &w, (a.0, &a.1), (b.0, &b.1), &title).map(|(svg, _)| svg)
    });
    if let Some(svg) = svg {
        let p = dir.join("sim-ab.svg");
        write_out(&p, &svg);
        eprintln!("xsim: wrote {} (A above B, one time axis)", p.display());
    }
}

fn main() -> std::process::ExitCode {
    sched_sim::cli::run_guarded("xsim", || {
        run();
        std::process::ExitCode::SUCCESS
    })
}

/// The command: its arguments parsed, then the experiment they name.
fn run() {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let cli = sched_sim::cli::parse::<Cli>("cargo xsim", &args)
        .unwrap_or_else(|code| std::process::exit(code.into()));
    let Some(cmd) = cli.cmd else {
        run_program(&cli.program);
        return end();
    };
    match cmd {
        Cmd::Sysbench { m, w: args } => {
            let cfg = config(&m);
            let w = args.workload(&m);
            let on = cfg.features | Features::UTIL_PULL_SKIPS_LONE_TASK;
            let off = cfg.features - Features::UTIL_PULL_SKIPS_LONE_TASK;
            let t = run_ab(
                &cfg,
                &w,
                (off, "without rule (pre-patch)"),
                (on, "with rule (c32b4308)"),
                args.iterations,
                "sysbench",
            );
            if m.json {
                println!("{}", serde_json::to_string_pretty(&t).unwrap_or_default());
            } else {
                println!(
                    "sysbench-like: {} threads, {} events of {} µs ±{:.0}%, {} CPUs ({}), HZ={}, {}",
                    args.threads,
                    args.events,
                    args.event_us,
                    args.jitter * 100.0,
                    cfg.cpus,
                    m.topology,
                    cfg.hz,
                    if cfg.nohz { "tickless idle" } else { "idle CPUs ticking" }
                );
                print!("{}", t.render());
                println!("every event done exactly once: {}", t.all_events_exactly_once);
            }
            write_ab_picture(
                &m,
                &cfg,
                &w,
                (off, "without the rule (pre-patch)"),
                (on, "with the rule (c32b4308)"),
            );
            if m.out.is_some() && cfg.cpus <= 8 {
                write_trace(&m, &Config { features: on, ..cfg }, &w);
            }
        }
        Cmd::Spread { m, cpu_counts, iterations } => {
            let cfg = machine_config(&m);
            for &n in &cpu_counts {
                check_cpus("--cpu-counts", n, cfg.topology, &m.topology);
            }
            no_out(&m, "spread");
            check_iterations("--iterations", iterations);
            let pb = bar((cpu_counts.len() * 2 * iterations) as u64);
            pb.set_message("spread");
            let pts = spread(&cfg, &cpu_counts, iterations, || pb.inc(1));
            pb.finish_and_clear();
            if m.json {
                println!("{}", serde_json::to_string_pretty(&pts).unwrap_or_default());
            } else {
                println!(
                    "{:>6} {:>12} {:>6} {:>12} {:>10} {:>11}",
                    "CPUs", "burst", "tasks", "median ms", "max ms", "migrations"
                );
                // A burst that never spread shows "never" when its run has no end to count it
                // as (the wake-on-one burst's spinners never finish).
                let ms = |v: f64| if v.is_finite() { format!("{v:.3}") } else { "never".into() };
                for p in pts {
                    println!(
                        "{:>6} {:>12} {:>6} {:>12} {:>10} {:>11.0}",
                        p.cpus,
                        p.burst,
                        p.tasks,
                        ms(p.median_ms),
                        ms(p.max_ms),
                        p.migrations
                    );
                }
            }
        }
        Cmd::Groups { m, seconds } => {
            let cfg = config(&m);
            no_out(&m, "groups");
            if !(1..=60).contains(&seconds) {
                usage("--seconds must be 1..=60")
            }
            if cfg.cpus > 64 {
                usage("groups run on at most 64 CPUs")
            }
            let rows = sched_sim::groups::run_groups(&cfg, seconds);
            if m.json {
                println!("{}", serde_json::to_string_pretty(&rows).unwrap_or_default());
            } else {
                println!(
                    "task groups: {} CPUs ({}), HZ={}, {} s measured per case after 1 s",
                    cfg.cpus, m.topology, cfg.hz, seconds
                );
                print!("{}", sched_sim::groups::render(&rows));
            }
        }
        Cmd::Ab { m, a, b, workload, w: args, l } => {
            if let Some(flag) = args::unused_option(workload, &m, &args, &l) {
                let (this, other) = match workload {
                    WorkloadKind::Sysbench => ("sysbench", "latency"),
                    WorkloadKind::Latency => ("latency", "sysbench"),
                };
                usage(&format!("{flag} is an option of --workload {other}; this A/B runs {this}"))
            }
            let cfg = config(&m);
            let w = match workload {
                WorkloadKind::Sysbench => args.workload(&m),
                WorkloadKind::Latency => l.workload(cfg.cpus),
            };
            let (fa, fb) = (features_on(cfg.features, &a), features_on(cfg.features, &b));
            // Each side's column says what it is, "the defaults" for an empty list.
            let label = |side: &str, f: &str| side_label(side, &m.features, f);
            let (la, lb) = (label("A", &a), label("B", &b));
            let t = run_ab(&cfg, &w, (fa, &la), (fb, &lb), args.iterations, "ab");
            if m.json {
                println!("{}", serde_json::to_string_pretty(&t).unwrap_or_default());
            } else {
                if let WorkloadKind::Latency = workload {
                    println!(
                        "latency: {} spinners + {} periodic tasks ({} µs on, {} µs asleep; half \
                         with a slice of {}), {} ms, {} CPUs ({}), HZ={}",
                        l.spinners,
                        l.periodic,
                        l.run_us,
                        l.sleep_us,
                        if l.slice_us == 0 { "default".to_string() } else { format!("{} µs", l.slice_us) },
                        l.duration_ms,
                        cfg.cpus,
                        m.topology,
                        cfg.hz
                    );
                }
                print!("{}", t.render());
            }
            write_ab_picture(&m, &cfg, &w, (fa, &la), (fb, &lb));
        }
    }
    end();
}

/// Ends the command: as a failed run (exit 1) if a run was cut at the bound, else normally.
fn end() {
    if RUNS_CUT.load(std::sync::atomic::Ordering::Relaxed) {
        std::process::exit(1);
    }
}

/// `cargo xsim --workload FILE`: the file lowered (or refused in one line with its own exit
/// code), then run K times with A and with B; rt-app's figures per task.
fn run_program(args: &ProgramArgs) {
    let Some(path) = &args.workload else {
        usage("give a subcommand (sysbench, spread, groups, ab) or --workload FILE; see --help")
    };
    let bytes = sched_workload::rtapp::read(path).unwrap_or_else(|e| {
        eprintln!("xsim: cannot read {}", sched_workload::one_line(&format!("{}: {e}", path.display())));
        std::process::exit(sched_sim::cli::INPUT_EXIT.into())
    });
    let def = sched_workload::rtapp::lower_bytes(&bytes).unwrap_or_else(|e| {
        eprintln!("xsim: {}", sched_workload::one_line(&format!("{}: {e}", path.display())));
        std::process::exit(e.exit_code().into())
    });
    let bytes = def.to_bytes();
    let prog = sched_workload::Program::parse(&bytes).expect("a lowered program parses");
    // Forks included; with forks without bound, those started with it.
    let threads = prog.thread_bound() as usize;
    let cfg = config(&args.m);
    if let Err(e) = sched_sim::machine::check_program(&prog, cfg.cpus, sched_sim::machine::SIM_Q) {
        eprintln!("xsim: {}", sched_workload::one_line(&format!("{}: {e}", path.display())));
        std::process::exit(e.exit_code().into())
    }
    let name =
        path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let w = Workload::program(&name, &def);
    let rule = (
        (cfg.features - Features::UTIL_PULL_SKIPS_LONE_TASK, "without rule (pre-patch)".to_string()),
        (cfg.features | Features::UTIL_PULL_SKIPS_LONE_TASK, "with rule (c32b4308)".to_string()),
    );
    let side = |f: &Option<String>, default: &(Features, String), tag: &str| match f {
        Some(list) => (features_on(cfg.features, list), side_label(tag, &args.m.features, list)),
        None => default.clone(),
    };
    let (a, b) = (side(&args.a, &rule.0, "A"), side(&args.b, &rule.1, "B"));
    let t = run_ab(&cfg, &w, (a.0, &a.1), (b.0, &b.1), args.iterations, "workload");
    if args.m.json {
        println!("{}", serde_json::to_string_pretty(&t).unwrap_or_default());
    } else {
        println!(
            "workload {name}: {} tasks, {threads} threads, {}, {} CPUs ({}), HZ={}, {}",
            def.tasks.len(),
            match def.duration_us {
                0 => format!(
                    "until every thread finishes (at most {} s)",
                    sched_sim::experiments::PROGRAM_CAP_S
                ),
                d => format!("{} s", d / 1_000_000),
            },
            cfg.cpus,
            args.m.topology,
            cfg.hz,
            if cfg.nohz { "tickless idle" } else { "idle CPUs ticking" }
        );
        print!("{}", t.render());
    }
    write_ab_picture(&args.m, &cfg, &w, (a.0, &a.1), (b.0, &b.1));
    if args.m.out.is_some() && cfg.cpus <= 8 {
        write_trace(&args.m, &Config { features: b.0, ..cfg }, &w);
    }
}
