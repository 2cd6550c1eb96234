//! The QEMU suite: one boot per scenario, judged on the kernel's exit code and its decoded
//! report. Timing is asserted only in deterministic mode; parallel mode hunts races.

use std::time::Duration;

mod cases;
mod devicetree;
mod judges;
mod linux;
mod workloads;

pub(crate) use cases::{cases, Case, LONG_CASES, VCPU_CASES};
pub(crate) use judges::{
    bounds, group_cap, group_share, judged_numbers, latency_figures, wakee_placement, LatencyFigures,
    EXC_STACK_BUDGET, EXIT_BAD_ARGS, STACK_REPORT, THREAD_STACK_REPORT, WIDE_EXC_STACK_BUDGET,
};
use judges::{stack_within_budget, thread_stack_headroom};

use crate::fuzz::Verdict;
use crate::qemu::{self, Arch, Boot, Machine, Mode};

/// Only the Linux guest's cases, on the aarch64 machine.
pub fn run_linux() -> (u64, u64) {
    match prepared(Arch::Aarch64) {
        Some(m) => linux::run(&m, true),
        None => (0, 1),
    }
}

/// Runs the suite on every architecture, each with its boot-line fuzz. Returns (passed,
/// failed). The Linux guests' boots, the longest, start with aarch64's cases and run beside
/// the rest (their QEMUs take host slots as the others do, [`crate::pool::host_slot`]); their
/// verdicts print at the end.
pub fn run() -> (u64, u64) {
    let (mut passed, mut failed) = (0, 0);
    std::thread::scope(|scope| {
        let mut linux = None;
        for arch in Arch::ALL {
            let Some(m) = prepared(arch) else {
                failed += 1;
                continue;
            };
            if arch == Arch::Aarch64 {
                let m = m.clone();
                linux =
                    Some(linux::guest(false).map(|guest| scope.spawn(move || linux::verdicts(&guest, &m))));
            }
            let (p, f) = run_arch(&m);
            passed += p;
            failed += f;
        }
        // The Linux guest's cases (none when its packages cannot be had).
        let (lp, lf) = match linux {
            Some(Ok(running)) => running.join().map_or_else(
                |_| {
                    eprintln!("xtest: the Linux cases panicked");
                    (0, 1)
                },
                |v| {
                    v.print();
                    (v.passed, v.failed)
                },
            ),
            Some(Err(counts)) => counts,
            None => (0, 0),
        };
        if lp + lf > 0 {
            eprintln!("xtest: QEMU suite, Debian's Linux on aarch64: {lp} passed, {lf} failed");
        }
        passed += lp;
        failed += lf;
    });
    (passed, failed)
}

/// One machine's part of the suite: its table of cases, on aarch64 also the vCPU shapes and
/// the workload files on two platforms, on the virt boards their altered device trees, then
/// the boot-line fuzz. Returns (passed, failed).
fn run_arch(m: &Machine) -> (u64, u64) {
    let cases = cases(m.arch);
    let (mut p, mut f, _) = run_cases(m, &cases, 1, SUITE_LIMIT);
    let mut more = 0;
    if m.arch == Arch::Aarch64 {
        for (cpus, numa, clusters, case) in VCPU_CASES {
            match m.with_cpus(*cpus) {
                Ok(m) => {
                    let m = Machine { numa: *numa, clusters: *clusters, ..m };
                    let (vp, vf, _) = run_cases(&m, &[case], 1, SUITE_LIMIT);
                    p += vp;
                    f += vf;
                }
                Err(e) => {
                    eprintln!("xtest: {e}");
                    f += 1;
                }
            }
        }
        let (wp, wf) = workloads::run(m);
        p += wp;
        f += wf;
        more = VCPU_CASES.len() + 2 * workloads::WORKLOAD_CASES.len();
    }
    if m.arch.virt() {
        let (tp, tf) = devicetree::run(m);
        p += tp;
        f += tf;
        more += 1;
    }
    let (fp, ff) = fuzz_boot_lines(m);
    eprintln!(
        "xtest: QEMU suite on {}: {} passed, {} failed ({} cases and the boot-line fuzz)",
        m.arch.name(),
        p + fp,
        f + ff,
        cases.len() + more
    );
    (p + fp, f + ff)
}

/// QEMU and the kernel for `arch`, or one line saying why not.
fn prepared(arch: Arch) -> Option<Machine> {
    qemu::prepare(arch).map_err(|line| eprintln!("xtest: {line}")).ok()
}

/// Boots each case `repeat` times on `m`, each within `limit`. Returns the boots passed and
/// failed, and how many times each case failed. The deterministic cases boot side by side
/// ([`crate::pool`]); the parallel ones after them, one at a time, as they need the whole host.
fn run_cases(m: &Machine, cases: &[&Case], repeat: usize, limit: Duration) -> (u64, u64, Vec<u64>) {
    let mut failures = vec![0u64; cases.len()];
    let (mut passed, mut failed) = (0, 0);
    for round in 1..=repeat {
        let round = if repeat > 1 { format!("round {round}/{repeat} ") } else { String::new() };
        let cpus = match (m.cpus == m.arch.cpus(), m.numa > 1) {
            (true, false) => String::new(),
            (_, false) => format!("{} vCPUs ", m.cpus),
            (_, true) => format!("{} vCPUs in {} NUMA nodes ", m.cpus, m.numa),
        };
        let mut verdict = |i: usize, b: Boot| {
            let c = cases[i];
            eprint!(
                "xtest: qemu {} {cpus}{round}[{}/{}] {} ({}) ... ",
                m.arch.name(),
                i + 1,
                cases.len(),
                c.name,
                c.mode.name()
            );
            if judge_case(m, c, &b) {
                passed += 1;
            } else {
                failed += 1;
                failures[i] += 1;
            }
        };
        for mode in [Mode::Deterministic, Mode::Parallel] {
            let of_mode: Vec<usize> = (0..cases.len()).filter(|&i| cases[i].mode == mode).collect();
            crate::pool::in_order(
                mode,
                of_mode.len(),
                |k| boot_case(m, cases[of_mode[k]], limit),
                |k, b| verdict(of_mode[k], b),
            );
        }
    }
    (passed, failed, failures)
}

/// Boots one case; a deterministic boot is kept for the margins table
/// ([`qemu::remembered`]), which reads the same runs the judges did.
fn boot_case(m: &Machine, c: &Case, limit: Duration) -> Boot {
    let b = qemu::boot(m, c.args, c.mode, limit);
    if c.mode == Mode::Deterministic {
        qemu::remember(m, c.args, &b);
    }
    b
}

/// Judges one case's boot; prints the verdict (and, on failure, why and the log's end).
fn judge_case(m: &Machine, c: &Case, b: &Boot) -> bool {
    let budget = if m.wide() { WIDE_EXC_STACK_BUDGET } else { EXC_STACK_BUDGET };
    match (c.judge)(b).and_then(|()| stack_within_budget(b, budget)).and_then(|()| thread_stack_headroom(b)) {
        Ok(()) => {
            let stack = |key, what| b.number_after(key).map_or(String::new(), |n| format!(", {what} {n} B"));
            let (exc, thread) =
                (stack(STACK_REPORT, "exception stack"), stack(THREAD_STACK_REPORT, "thread stack"));
            eprintln!("ok ({:.1} s{exc}{thread})", b.wall.as_secs_f64());
            true
        }
        Err(why) => {
            eprintln!("FAILED: {why}");
            eprintln!("  command line: {}", c.args);
            if let Some(said) = &b.qemu_said {
                eprintln!("  QEMU said: {said}");
            }
            if let Some(said) = &b.firmware_said {
                eprintln!("  the firmware said, before the kernel: {said}");
            }
            // (The kernel's own verdicts, wherever they fall: a check names what failed in a
            // `FAIL` line before the report's last lines.)
            let telling = |l: &&String| l.contains("PANIC") || l.contains("error") || l.contains("FAIL");
            for l in b.lines.iter().filter(telling).take(8) {
                eprintln!("  {l}");
            }
            eprintln!("  last log lines:");
            for l in b.lines.iter().rev().take(12).collect::<Vec<_>>().into_iter().rev() {
                eprintln!("    {l}");
            }
            false
        }
    }
}

/// How long one of the suite's boots may take: a hang's catch, not a speed check. The longest
/// case (task groups: 8 vCPUs, a 2-second window per case and per nested round, each after
/// its warm-up, in one TCG thread) takes several times its guest time on a small host, and
/// more on a busy one, so the limit leaves it ample room above the time the suite prints
/// beside its verdict.
pub(crate) const SUITE_LIMIT: Duration = Duration::from_secs(240);

/// Which cases a flake hunt or a long run takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// The suite's cases (every CI run has them).
    Suite,
    /// The long cases ([`LONG_CASES`]): too slow for every CI run.
    Long,
}

/// Runs the selected cases `repeat` times each, only those of `mode` if given, on `arch` (every
/// architecture if `None`) (`cargo xtest --repeat N --mode parallel --arch riscv64`, `cargo
/// xtest --long`). Prints how often each case failed. Returns (passed, failed) boots.
pub fn run_repeated(which: Selection, repeat: usize, mode: Option<Mode>, arch: Option<Arch>) -> (u64, u64) {
    let (mut passed, mut failed) = (0, 0);
    for arch in Arch::ALL.into_iter().filter(|a| arch.is_none_or(|x| x == *a)) {
        let Some(m) = prepared(arch) else {
            failed += 1;
            continue;
        };
        let (cases, limit) = match which {
            Selection::Suite => (cases(arch), SUITE_LIMIT),
            Selection::Long if matches!(arch, Arch::CortexM4 | Arch::CortexM33) => (Vec::new(), SUITE_LIMIT),
            Selection::Long => (LONG_CASES.iter().collect(), Duration::from_secs(3600)),
        };
        let cases: Vec<&Case> = cases.into_iter().filter(|c| mode.is_none_or(|m| c.mode == m)).collect();
        let start = std::time::Instant::now();
        let (p, f, failures) = run_cases(&m, &cases, repeat, limit);
        eprintln!(
            "xtest: {}: {} boots of {} cases in {:.0} s: {} failed",
            arch.name(),
            p + f,
            cases.len(),
            start.elapsed().as_secs_f64(),
            f
        );
        for (c, n) in cases.iter().zip(&failures).filter(|(_, &n)| n > 0) {
            eprintln!("xtest:   {n} of {repeat} failed on {}: {} ({})", arch.name(), c.name, c.mode.name());
        }
        passed += p;
        failed += f;
    }
    (passed, failed)
}

/// The boot-line fuzz: every line ends by itself as its [`Verdict`] says: refused with exit 3
/// and one error line, or accepted with exit 0 and none (deterministic mode). One result for
/// the whole set; each failing line is shown.
fn fuzz_boot_lines(m: &Machine) -> (u64, u64) {
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (n, seed) = (env("FUZZ_LINES", FUZZ_LINES) as usize, env("FUZZ_SEED", FUZZ_SEED));
    let mut lines = crate::fuzz::fixed_lines();
    lines.extend(crate::fuzz::random_lines(seed, n).into_iter().map(|l| (l, Verdict::Refused)));
    eprint!(
        "xtest: qemu {} boot-line fuzz: {} lines (seed {seed}), each refused with exit {EXIT_BAD_ARGS} and one error line, or accepted ... ",
        m.arch.name(),
        lines.len()
    );
    let start = std::time::Instant::now();
    let mut bad = Vec::new();
    crate::pool::in_order(
        Mode::Deterministic,
        lines.len(),
        |i| {
            use std::os::unix::ffi::OsStrExt;
            qemu::boot(
                m,
                std::ffi::OsStr::from_bytes(&lines[i].0),
                Mode::Deterministic,
                Duration::from_secs(30),
            )
        },
        |i, b| {
            let (line, verdict) = &lines[i];
            let errors = b.lines.iter().filter(|l| l.contains("error: ")).count();
            let ok = !b.timed_out
                && match verdict {
                    Verdict::Refused => b.code == Some(EXIT_BAD_ARGS) && errors == 1,
                    Verdict::Accepted => b.code == Some(0) && errors == 0,
                };
            if !ok {
                bad.push(format!(
                    "{:?} with {errors} error lines (timed out: {}), not {verdict:?}: {}",
                    b.code,
                    b.timed_out,
                    crate::fuzz::show(line)
                ));
            }
        },
    );
    if bad.is_empty() {
        eprintln!("ok ({:.1} s)", start.elapsed().as_secs_f64());
        (1, 0)
    } else {
        eprintln!("FAILED: {} of {} lines", bad.len(), lines.len());
        for b in bad.iter().take(20) {
            eprintln!("  exit {b}");
        }
        (0, 1)
    }
}

/// Random boot lines the fuzz adds to its fixed list in every run (`FUZZ_LINES` overrides).
pub(crate) const FUZZ_LINES: u64 = 24;
/// Their seed (`FUZZ_SEED` overrides).
const FUZZ_SEED: u64 = 0x5eed;
