//! The host runner.
//!
//! - `cargo xtest` (`qemu-tests test`): every host crate's tests (with the core's small-build
//!   tests and the worked ports of PORTING.md), the lint gates (rustfmt,
//!   clippy of the host crates and of the kernel, rustdoc, all with warnings as errors), the
//!   sched-core package tested unpacked (`package.rs`), the bare-metal builds of the core, the size budgets (`size::check`), then the QEMU suite and
//!   its boot-line fuzz and workload files on every machine, and last `docs/measurements.md`
//!   regenerated and compared; one summary line `N passed, N failed`. With `--repeat N` or
//!   `--long` (narrowed by `--mode M` and `--arch A`), only QEMU boots: the suite's cases (or
//!   the long ones) repeated; with `--linux`, only the Linux guest's cases.
//! - `cargo xrun` (`qemu-tests run`): the seed's experiment on the kernel under QEMU with the
//!   rule on and off, beside the simulator's throughput table, plus a trace and an SVG.
//! - `cargo xsize` (`qemu-tests size`): sizes beside their budgets (see `size.rs`).
//! - `cargo xboot` (`qemu-tests boot`): one boot of the kernel, its log decoded and printed.
//! - `cargo xreport` (`qemu-tests report`): writes `docs/measurements.md` (see `report.rs`).

mod args;
mod fuzz;
mod imports;
mod kernel_devicetree;
mod kernel_doc;
mod kernel_topology;
mod links;
mod linux;
mod margins;
mod package;
mod pool;
mod qemu;
mod report;
mod size;
mod source;
mod suite;
mod suite_doc;
mod sysbench_figures;
mod workload;
mod xrun;
mod xrun_groups;
mod xrun_linux;
mod xrun_options;
mod xrun_trace;
mod xrun_workload;

use std::process::{Command, ExitCode, Stdio};

use sched_sim::cli::parse;

/// The bare-metal targets sched-core must build for, with the features a build for that target
/// needs: Armv6-M has no compare-and-swap, so the final binary picks how portable-atomic
/// provides it; `critical-section` is the choice that is right on any number of cores.
const BARE_METAL_TARGETS: &[(&str, &[&str])] = &[
    // The 32-bit MCUs build as a small machine does: 64-CPU masks (no `max-cpus-*` feature).
    ("thumbv6m-none-eabi", &["--no-default-features", "--features", "portable-atomic/critical-section"]),
    ("thumbv7em-none-eabihf", &["--no-default-features"]),
    ("thumbv7em-none-eabihf", &["--no-default-features", "--features", "groups"]),
    // The embedded logging option: defmt::Format for the public types (default features).
    ("thumbv7em-none-eabihf", &["--features", "defmt"]),
    ("thumbv8m.main-none-eabihf", &["--no-default-features"]),
    ("riscv32imac-unknown-none-elf", &["--no-default-features"]),
    ("riscv64gc-unknown-none-elf", &[]),
    ("x86_64-unknown-none", &[]),
    ("aarch64-unknown-none", &[]),
    ("aarch64-unknown-none-softfloat", &[]),
];

/// The core's tests of a build without default features (the `small_build` ones: topologies
/// that need a left-out feature are refused).
const SMALL_BUILD_TESTS: &[&str] =
    &["test", "-p", "sched-core", "--lib", "--no-default-features", "--", "small_build"];

/// The core's tests of the `groups` feature, left out of a default build: its module `group`
/// and the machine's and the port's group calls (`smp::groups`, `port::groups`).
const GROUPS_TESTS: &[&str] =
    &["test", "-p", "sched-core", "--features", "groups", "--", "group::", "groups::"];

fn main() -> ExitCode {
    sched_sim::cli::run_guarded("qemu-tests", run)
}

/// The command: its arguments parsed, then the command they name.
fn run() -> ExitCode {
    // (The runner's options and paths are text: one that is not is refused, not a panic.)
    let args: Vec<String> = match std::env::args_os().skip(1).map(|a| a.into_string()).collect() {
        Ok(args) => args,
        Err(bad) => {
            eprintln!("qemu-tests: an argument is not UTF-8 text: {}", bad.to_string_lossy());
            return ExitCode::from(sched_sim::cli::USAGE_EXIT);
        }
    };
    let rest = args.get(1..).unwrap_or_default();
    let code = match args.first().map(String::as_str) {
        Some("test") => parse::<args::TestArgs>("cargo xtest", rest).map(run_tests),
        Some("run") => Ok(xrun::main(rest)),
        Some("size") => parse::<args::SizeArgs>("cargo xsize", rest).map(|_| size::main()),
        Some("boot") => parse::<args::BootArgs>("cargo xboot", rest).map(boot_once),
        Some("report") => parse::<args::ReportArgs>("cargo xreport", rest)
            .map(|a| report::main(a.timings, a.linux, a.only.as_deref())),
        Some("--help" | "-h") => {
            println!("{COMMANDS}");
            return ExitCode::SUCCESS;
        }
        other => {
            eprintln!(
                "qemu-tests: {}: a command is test, run, size, boot or report",
                other.unwrap_or("no command")
            );
            Err(sched_sim::cli::USAGE_EXIT)
        }
    };
    code.unwrap_or_else(ExitCode::from)
}

/// The runner's commands (each answers `--help`).
const COMMANDS: &str = "usage: qemu-tests <command> [--help]\n\n  test   cargo xtest: all tests\n  \
                        run    cargo xrun: the seed's experiment\n  size   cargo xsize: sizes beside their budgets\n  \
                        boot   cargo xboot: one boot of the kernel\n  report cargo xreport: writes docs/measurements.md";

/// `cargo xboot`: one boot of the kernel (see [`args::BootArgs`]), its decoded log
/// printed; exits with the kernel's exit code. `--numa` and `--clusters` describe the machine
/// to QEMU (see [`qemu::Machine`]).
fn boot_once(a: args::BootArgs) -> ExitCode {
    let args::BootArgs { arch, mode, smp: cpus, numa, clusters, workload, line } = a;
    let default = if workload.is_some() { "scenario=program" } else { "scenario=boot" };
    let line = if line.is_empty() { default.to_string() } else { line.join(" ") };
    // `scenario=program` and `--workload` go together: one without the other is refused.
    let program =
        line.split_whitespace().filter_map(|w| w.strip_prefix("scenario=")).next_back() == Some("program");
    match (&workload, program) {
        (None, true) => return usage_error("scenario=program runs the file --workload FILE loads: give one"),
        (Some(_), false) => {
            return usage_error("--workload FILE runs with scenario=program (the default with it)")
        }
        _ => {}
    }
    // A workload file is lowered (or refused) before anything is built or booted.
    let loaded = match workload.as_deref().map(|w| workload::load(w, arch)).transpose() {
        Ok(l) => l,
        Err((code, why)) => {
            eprintln!("xboot: {why}");
            return ExitCode::from(code);
        }
    };
    // The machine's shape is checked before QEMU is installed or the kernel built.
    let n = cpus.unwrap_or(arch.cpus());
    if n == 0 || n > arch.max_cpus() || (arch.max_cpus() == arch.cpus() && n != arch.cpus()) {
        return usage_error(&format!("--smp {n}: {} takes 1..={} CPUs", arch.name(), arch.max_cpus()));
    }
    // A CPU mask past the machine's CPUs is refused here, as the kernel (and rt-app) would.
    if let Some(l) = &loaded {
        let bytes = l.def.to_bytes();
        if let Some((t, m, c)) = sched_workload::Program::parse(&bytes).ok().and_then(|p| p.mask_past_cpus(n))
        {
            let name = sched_workload::one_line(t.name());
            eprintln!("xboot: task {name}: its CPU mask {m:#x} names CPU {c}, past the machine's {n} CPUs");
            return ExitCode::from(14);
        }
    }
    let virt = arch.virt();
    if numa > 1 && (!virt || n % numa != 0) {
        return usage_error(&format!("--numa {numa}: a virt board whose CPUs it divides"));
    }
    let per = n / numa.max(1);
    if clusters > 0 && (!virt || (clusters < per && per % clusters != 0)) {
        return usage_error(&format!(
            "--clusters {clusters}: a virt board whose nodes' {per} CPUs it divides"
        ));
    }
    let mut m = match qemu::prepare(arch) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("xboot: {e}");
            return ExitCode::from(XBOOT_UNPREPARED);
        }
    };
    if cpus.is_some() {
        m = match m.with_cpus(n) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("xboot: {e}");
                return ExitCode::from(XBOOT_UNPREPARED);
            }
        };
    }
    if numa > 1 {
        m.numa = numa;
    }
    if clusters > 0 {
        m.clusters = clusters;
    }
    m.program = loaded.as_ref().map(|l| l.file.path());
    let b = qemu::boot(&m, &line, mode, std::time::Duration::from_secs(600));
    for l in &b.lines {
        println!("{l}");
    }
    if let Some(l) = &loaded {
        match workload::figures(&b, &l.def, m.cpus) {
            Some(r) => {
                for t in &r.tasks {
                    println!(
                        "xboot: {}: {} activations, run mean {:.0} us, wake-to-run p50/p99/max {:.0}/{:.0}/{:.0} us, slack p50 {:.0} us, {} timer misses, CPU share {:.2} %",
                        t.name, t.activations, t.run_us.mean, t.wake_us.p50, t.wake_us.p99, t.wake_us.max,
                        t.slack_us.p50, t.misses, t.cpu_share_pct
                    );
                }
                println!(
                    "xboot: run {:.3} ms, {} threads blocked at the end",
                    r.run_ns as f64 / 1e6,
                    r.blocked
                );
            }
            None if b.code == Some(0) => {
                eprintln!(
                    "xboot: the boot exited 0 and reported no program figures (its log is cut or damaged)"
                );
                return ExitCode::from(XBOOT_NO_FIGURES);
            }
            None => eprintln!("xboot: the boot reported no program figures"),
        }
    }
    eprintln!(
        "xboot: {} {} \"{line}\": exit {:?}{} in {:.1} s",
        arch.name(),
        mode.name(),
        b.code,
        if b.timed_out { " (timed out)" } else { "" },
        b.wall.as_secs_f64()
    );
    if b.timed_out {
        return ExitCode::from(XBOOT_TIMED_OUT);
    }
    if b.qemu_failed() {
        eprintln!(
            "xboot: QEMU ended before the kernel spoke: {}",
            b.qemu_said.as_deref().unwrap_or("it said nothing")
        );
        return ExitCode::from(XBOOT_QEMU_FAILED);
    }
    ExitCode::from(b.code.map_or(XBOOT_QEMU_FAILED, |c| c.clamp(0, 255) as u8))
}

/// `cargo xboot`'s exit when the machine could not be prepared: QEMU missing (and not
/// installable here) or the kernel's build failed.
const XBOOT_UNPREPARED: u8 = 69;
/// `cargo xboot --workload`'s exit when the kernel exited 0 but its program figures could not
/// be read from its log.
const XBOOT_NO_FIGURES: u8 = 65;
/// `cargo xboot`'s exit when the boot hit its time limit (600 s).
const XBOOT_TIMED_OUT: u8 = 124;
/// `cargo xboot`'s exit when QEMU could not start, or ended before the kernel said anything.
const XBOOT_QEMU_FAILED: u8 = 125;

fn usage_error(line: &str) -> ExitCode {
    eprintln!("cargo xboot: {line}");
    ExitCode::from(sched_sim::cli::USAGE_EXIT)
}

/// The longest the toy port (`core/examples/toy_port.rs`) may be: PORTING.md promises a
/// complete host in at most this many lines.
const TOY_PORT_MAX_LINES: usize = 100;

/// PORTING.md's worked ports in `core/examples/`: name, what it shows, the most lines it may
/// have, how many runs (the threaded one races for real: each run is another interleaving).
const WORKED_PORTS: &[(&str, &str, Option<usize>, usize)] = &[
    ("toy_port", "runs 2 CPUs to completion", Some(TOY_PORT_MAX_LINES), 1),
    ("threads_port", "runs 4 CPUs with sleep, wake, tickless idle and full runqueues to completion", None, 5),
];

/// Builds and runs a worked port: each run must finish (under a minute) and say `ok`, and
/// the file fit its promised size.
fn worked_port(&(name, what, max_lines, runs): &(&str, &str, Option<usize>, usize)) -> bool {
    let path = format!("{}/../core/examples/{name}.rs", env!("CARGO_MANIFEST_DIR"));
    let lines = std::fs::read_to_string(path).map(|s| s.lines().count()).unwrap_or(usize::MAX);
    let build = cargo().args(["build", "-q", "-p", "sched-core", "--example", name]).status();
    if !build.is_ok_and(|s| s.success()) {
        eprintln!("xtest: {name}: build failed ... FAILED");
        return false;
    }
    // Built above, so the minute is the run's (a hang is a failure, not a stuck CI).
    let cargo_bin = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let said_ok = (0..runs).all(|_| {
        let out = Command::new("timeout")
            .args(["60", &cargo_bin, "run", "-q", "-p", "sched-core", "--example", name])
            .output();
        let ok = out
            .as_ref()
            .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains(": ok"));
        if !ok {
            if let Ok(o) = &out {
                eprint!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
            }
        }
        ok
    });
    let fits = max_lines.is_none_or(|m| lines <= m);
    let ok = said_ok && fits;
    let verdict = if ok { "ok" } else { "FAILED" };
    let cap = max_lines.map_or(String::new(), |m| format!(", at most {m}"));
    eprintln!("xtest: {name} ({lines} lines{cap}) {what}, {runs} run(s) ... {verdict}");
    ok
}

/// Totals over every `test result:` line cargo printed.
#[derive(Default, Debug, PartialEq)]
struct Tally {
    passed: u64,
    failed: u64,
}

impl Tally {
    /// Adds a step's (passed, failed) counts; a step with failures is named in `failed_steps`.
    fn add_step(
        &mut self,
        name: &'static str,
        (passed, failed): (u64, u64),
        failed_steps: &mut Vec<&'static str>,
    ) {
        self.passed += passed;
        self.failed += failed;
        if failed > 0 {
            failed_steps.push(name);
        }
    }

    /// Adds the counts of lines like `test result: ok. 40 passed; 0 failed; 0 ignored; ...`.
    fn add_output(&mut self, text: &str) {
        for line in text.lines() {
            let Some(rest) = line.trim().strip_prefix("test result: ") else { continue };
            for part in rest.split(';') {
                let words: Vec<&str> = part.split_whitespace().collect();
                if let [.., n, kind] = words.as_slice() {
                    let n: u64 = n.parse().unwrap_or(0);
                    match *kind {
                        "passed" => self.passed += n,
                        "failed" => self.failed += n,
                        _ => {}
                    }
                }
            }
        }
    }
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Runs a command with inherited stderr, echoing and capturing stdout.
fn run_capture(cmd: &mut Command) -> (bool, String) {
    let out = match cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("xtest: could not start {cmd:?}: {e}");
            return (false, String::new());
        }
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{text}");
    (out.status.success(), text)
}

/// Makes sure the bare-metal target's standard library is installed; the toolchain file
/// lists it, but rustup only installs listed targets when it installs the toolchain itself.
pub(crate) fn ensure_target(target: &str) -> bool {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().any(|l| l.trim() == target))
        .unwrap_or(false);
    if installed {
        return true;
    }
    eprintln!("xtest: installing the {target} target with rustup");
    Command::new("rustup").args(["target", "add", target]).status().map(|s| s.success()).unwrap_or(false)
}

/// One lint gate of `cargo xtest`: a cargo command that must succeed without a warning.
struct Gate {
    /// What a failure is called in the summary.
    name: &'static str,
    /// Run from this folder of the workspace ("" = the root): the kernel builds from its own.
    dir: &'static str,
    /// Cargo's arguments.
    args: &'static [&'static str],
    /// Extra environment.
    env: &'static [(&'static str, &'static str)],
}

/// The habits CI enforces, each a step of `cargo xtest` that fails on any warning.
const LINT_GATES: &[Gate] = &[
    Gate { name: "rustfmt", dir: "", args: &["fmt", "--all", "--check"], env: &[] },
    Gate {
        name: "clippy (host crates)",
        dir: "",
        args: &["clippy", "--workspace", "--exclude", "kernel-shim", "--all-targets", "--", "-D", "warnings"],
        env: &[],
    },
    Gate {
        name: "clippy (sched-core, groups)",
        dir: "",
        args: &[
            "clippy",
            "-p",
            "sched-core",
            "--features",
            "groups",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        env: &[],
    },
    Gate {
        name: "clippy (kernel, aarch64)",
        dir: "kernel-shim",
        args: &["clippy", "--release", "--target", "aarch64-unknown-none-softfloat", "--", "-D", "warnings"],
        env: &[],
    },
    Gate {
        name: "clippy (kernel, riscv64)",
        dir: "kernel-shim",
        args: &["clippy", "--release", "--target", "riscv64imac-unknown-none-elf", "--", "-D", "warnings"],
        env: &[],
    },
    Gate {
        name: "clippy (kernel, cortex-m4)",
        dir: "kernel-shim",
        args: &["clippy", "--profile", "mcu", "--target", "thumbv7em-none-eabihf", "--", "-D", "warnings"],
        env: &[],
    },
    Gate {
        name: "clippy (kernel, cortex-m33)",
        dir: "kernel-shim",
        args: &[
            "clippy",
            "--profile",
            "mcu",
            "--target",
            "thumbv8m.main-none-eabihf",
            "--",
            "-D",
            "warnings",
        ],
        env: &[],
    },
    Gate {
        name: "rustdoc (host crates)",
        dir: "",
        args: &["doc", "--no-deps", "--workspace", "--exclude", "kernel-shim"],
        env: &[("RUSTDOCFLAGS", "-D warnings")],
    },
    // sched-core as its users document it (crates.io, docs.rs), outside the workspace's
    // feature unification (the simulator turns `internals` on): each of its feature sets.
    Gate {
        name: "rustdoc (sched-core, default features)",
        dir: "",
        args: &["doc", "--no-deps", "-p", "sched-core"],
        env: &[("RUSTDOCFLAGS", "-D warnings"), ("CARGO_TARGET_DIR", "target/doc-sched-core")],
    },
    Gate {
        name: "rustdoc (sched-core, no default features)",
        dir: "",
        args: &["doc", "--no-deps", "-p", "sched-core", "--no-default-features"],
        env: &[("RUSTDOCFLAGS", "-D warnings"), ("CARGO_TARGET_DIR", "target/doc-sched-core")],
    },
    Gate {
        name: "rustdoc (sched-core, all features)",
        dir: "",
        args: &["doc", "--no-deps", "-p", "sched-core", "--all-features"],
        env: &[("RUSTDOCFLAGS", "-D warnings"), ("CARGO_TARGET_DIR", "target/doc-sched-core")],
    },
    Gate {
        name: "rustdoc (kernel)",
        dir: "kernel-shim",
        args: &["doc", "--no-deps", "--release"],
        env: &[("RUSTDOCFLAGS", "-D warnings")],
    },
];

/// Runs one lint gate; its output goes to the terminal.
fn run_gate(gate: &Gate) -> bool {
    if gate.dir == "kernel-shim" && !qemu::Arch::ALL.iter().all(|a| ensure_target(a.target())) {
        return false;
    }
    let dir = qemu::root().join(gate.dir);
    let ok = cargo().args(gate.args).envs(gate.env.iter().copied()).current_dir(&dir).status();
    match ok {
        Ok(s) if s.success() => true,
        Ok(_) => {
            eprintln!("xtest: lint gate failed: {} (cargo {})", gate.name, gate.args.join(" "));
            false
        }
        Err(e) => {
            eprintln!("xtest: could not run cargo for {}: {e}", gate.name);
            false
        }
    }
}

fn run_tests(a: args::TestArgs) -> ExitCode {
    match a.repeat() {
        Ok(None) if a.linux => {
            let (p, f) = suite::run_linux();
            println!("xtest: {p} passed, {f} failed");
            return if f == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE };
        }
        Ok(None) => {}
        Err(line) => {
            eprintln!("cargo xtest: {line}");
            return ExitCode::from(sched_sim::cli::USAGE_EXIT);
        }
        Ok(Some((which, repeat, mode, arch))) => {
            let (p, f) = suite::run_repeated(which, repeat, mode, arch);
            println!("xtest: {p} passed, {f} failed");
            return if f == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE };
        }
    }
    // The QEMU suite's emulators, found (or installed) before the first step: a machine
    // without one stops here in one line, not after the host steps' minutes.
    let emulators: std::collections::BTreeMap<_, _> =
        qemu::Arch::ALL.iter().map(|&a| (a.qemu(), a)).collect();
    let missing: Vec<String> = emulators.values().filter_map(|&a| qemu::find_or_install(a).err()).collect();
    if !missing.is_empty() {
        eprintln!("xtest: {}", missing.join("; "));
        return ExitCode::from(XBOOT_UNPREPARED);
    }
    let mut tally = Tally::default();
    let mut steps_failed = Vec::new();
    let mut clock = StepClock::default();

    // All targets (lib, tests, and the criterion benches run once each as tests, so they
    // cannot rot), then the doc examples, which --all-targets leaves out.
    clock.step(
        "host tests",
        "xtest: [1/7] host tests of every crate (cargo test --workspace --all-targets, then --doc, \
         then the core's small-build and groups tests)",
    );
    let (ok, text) = run_capture(
        cargo()
            .args(["test", "--workspace", "--exclude", "kernel-shim", "--all-targets"])
            .args(&a.cargo_args),
    );
    tally.add_output(&text);
    if !ok {
        steps_failed.push("host tests");
    }
    let (ok, text) = run_capture(
        cargo().args(["test", "--workspace", "--exclude", "kernel-shim", "--doc"]).args(&a.cargo_args),
    );
    tally.add_output(&text);
    if !ok {
        steps_failed.push("doc tests");
    }
    // The core as a small machine builds it (no default features): what it refuses to build;
    // and the `groups` feature's tests and examples. (A filter that matched nothing would
    // pass silently: each step needs a test that ran.)
    for (args, step) in [(SMALL_BUILD_TESTS, "small-build tests"), (GROUPS_TESTS, "groups tests")] {
        let (ok, text) = run_capture(cargo().args(args));
        let mut mine = Tally::default();
        mine.add_output(&text);
        tally.add_output(&text);
        if !ok || mine.passed == 0 {
            if mine.passed == 0 {
                tally.failed += 1;
                eprintln!("xtest: {step}: no test ran (filter `{}`) ... FAILED", args[args.len() - 1]);
            }
            steps_failed.push(step);
        }
    }
    // PORTING.md's worked ports, built and run.
    for port in WORKED_PORTS {
        if worked_port(port) {
            tally.passed += 1;
        } else {
            tally.failed += 1;
            steps_failed.push("worked ports");
        }
    }

    clock.step("lint gates", "xtest: [2/7] lint gates: rustfmt, clippy (host crates and kernel), rustdoc (sched-core in each feature set); warnings fail");
    for gate in LINT_GATES {
        if run_gate(gate) {
            tally.passed += 1;
        } else {
            tally.failed += 1;
            steps_failed.push(gate.name);
        }
    }

    clock.step(
        "package",
        "xtest: [3/7] the sched-core package: cargo package, then cargo test in the unpacked package",
    );
    let (ok, text) = package::check(cargo, run_capture);
    tally.add_output(&text);
    if ok {
        tally.passed += 1;
    } else {
        tally.failed += 1;
        steps_failed.push("sched-core package");
    }

    clock.step("bare-metal builds", "xtest: [4/7] sched-core (and sched-workload's reader) build for the bare-metal targets (no_std, no alloc)");
    for (target, features) in BARE_METAL_TARGETS {
        let built = ensure_target(target)
            && cargo()
                .args(["build", "-p", "sched-core", "--target", target, "--release"])
                .args(*features)
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
        if built {
            tally.passed += 1;
        } else {
            tally.failed += 1;
            eprintln!("xtest: sched-core does not build for {target} {}", features.join(" "));
            steps_failed.push("bare-metal builds of sched-core");
        }
    }
    // The workload programs' reader and interpreter, as a kernel takes them: no_std, no alloc.
    let target = "thumbv7em-none-eabihf";
    let built = ensure_target(target)
        && cargo()
            .args(["build", "-p", "sched-workload", "--no-default-features", "--target", target, "--release"])
            .status()
            .is_ok_and(|s| s.success());
    if built {
        tally.passed += 1;
    } else {
        tally.failed += 1;
        eprintln!("xtest: sched-workload does not build for {target} without std");
        steps_failed.push("bare-metal builds of sched-core");
    }

    clock.step(
        "size budgets",
        "xtest: [5/7] memory and code-size budgets on thumbv7em (cargo xsize's figures)",
    );
    tally.add_step("size budgets", size::check(), &mut steps_failed);

    clock.step("QEMU suite", "xtest: [6/7] the QEMU suite: aarch64 (8 vCPUs, and 2, 16 and a NUMA machine), riscv64 (8), Cortex-M4, 2x Cortex-M33");
    tally.add_step("QEMU suite", suite::run(), &mut steps_failed);

    clock.step("measurements", "xtest: [7/7] docs/measurements.md: each section regenerated and compared");
    tally.add_step("docs/measurements.md", report::check(), &mut steps_failed);

    clock.report();
    if !steps_failed.is_empty() {
        eprintln!("xtest: failed steps: {}", steps_failed.join(", "));
    }
    println!("xtest: {} passed, {} failed", tally.passed, tally.failed);
    if steps_failed.is_empty() && tally.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Wall time of each of `cargo xtest`'s steps, printed at the end: where CI's budget goes.
#[derive(Default)]
struct StepClock {
    /// Each finished step's name and seconds, then the running one's name and start.
    done: Vec<(&'static str, f64)>,
    running: Option<(&'static str, std::time::Instant)>,
}

impl StepClock {
    /// Ends the running step (if any) and starts `name`, printing its header line.
    fn step(&mut self, name: &'static str, header: &str) {
        self.end();
        eprintln!("{header}");
        self.running = Some((name, std::time::Instant::now()));
    }

    fn end(&mut self) {
        if let Some((name, start)) = self.running.take() {
            self.done.push((name, start.elapsed().as_secs_f64()));
        }
    }

    /// Ends the running step and prints one line with every step's wall time.
    fn report(&mut self) {
        self.end();
        let parts: Vec<String> = self.done.iter().map(|(n, s)| format!("{n} {s:.0} s")).collect();
        let total: f64 = self.done.iter().map(|(_, s)| s).sum();
        eprintln!("xtest: wall time by step: {} (total {total:.0} s)", parts.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_sums_cargo_result_lines() {
        let mut t = Tally::default();
        t.add_output(
            "running 3 tests\ntest result: ok. 40 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.36s\n\
             test result: FAILED. 6 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\nnoise passed\n",
        );
        assert_eq!(t, Tally { passed: 46, failed: 1 });
    }
}
