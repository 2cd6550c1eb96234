//! Linux boots in the suite, so that the path of `cargo xrun --linux` cannot rot:
//! Debian's kernel on the suite's aarch64 machine (8 vCPUs, deterministic mode) runs its
//! cgroup v2 CPU controller (two guests), one sysbench run and rt-app on
//! `workloads/periodic.json`, each read back with the kernel's metric definitions; the boots
//! run side by side. When Debian's packages cannot be fetched, one line says so and the cases
//! are not counted.

use std::time::Duration;

use crate::linux::{measure, rtapp, Guest, Job};
use crate::qemu::{Machine, Mode};

/// The rt-app file the suite runs on Linux.
const FILE: &str = "workloads/periodic.json";

/// A boot's limit: the boot (~5 s of host time) and one run of a few seconds.
const LIMIT: Duration = Duration::from_secs(240);

/// The sysbench case: 8 workers spread over the 8 vCPUs, the 1000 events done, and the one
/// flat domain Linux builds on `virt`.
fn sysbench(guest: &Guest, m: &Machine) -> Result<String, String> {
    let c = guest.boot(m, Mode::Deterministic, &Job::Sysbench { threads: 8, events: 1000 }, 1, LIMIT)?;
    let run = c.runs.first().ok_or("no run")?;
    if !run.output.iter().any(|l| l.contains("total number of events:") && l.trim_end().ends_with(" 1000")) {
        return Err("sysbench did not report 1000 events".into());
    }
    let f = measure::sysbench(run, m.cpus, 8)?;
    if f.spread_ms >= f.total_ms {
        return Err(format!("the 8 workers never ran on 8 CPUs at once ({:.3} ms)", f.spread_ms));
    }
    let levels: Vec<&str> =
        c.domains.iter().filter(|(at, _, _)| at.starts_with("cpu0/")).map(|(_, n, _)| n.as_str()).collect();
    if levels != ["DIE"] {
        return Err(format!("Linux built {levels:?}, not its one flat DIE level"));
    }
    Ok(format!("spread {:.3} ms, total {:.1} ms, domains {}", f.spread_ms, f.total_ms, c.domain_line()))
}

/// The rt-app case: every thread logged, both tasks ran (a share each), and no more
/// activations than the file's periods allow.
fn periodic(guest: &Guest, m: &Machine) -> Result<String, String> {
    let text = std::fs::read_to_string(crate::qemu::root().join(FILE)).map_err(|e| format!("{FILE}: {e}"))?;
    let def = sched_workload::rtapp::lower(&text).map_err(|e| format!("{FILE}: {e}"))?;
    let json = sched_workload::rtapp::linux::guest_json(&text).map_err(|e| format!("{FILE}: {e}"))?.json;
    let c = guest.boot(m, Mode::Deterministic, &Job::RtApp { json: json.as_bytes() }, 1, LIMIT)?;
    let run = c.runs.first().ok_or("no run")?;
    if run.logs.len() != 8 {
        return Err(format!("{} rt-app logs, not one per thread (8)", run.logs.len()));
    }
    let r = rtapp::measure(run, &def, m.cpus)?;
    // 6 × 200 periods of 10 ms and 2 × 125 of 16 ms at most; at least half of them even when
    // QEMU's single-threaded vCPUs make Linux miss timers.
    for (name, lo, hi) in [("light", 600, 1200), ("heavy", 125, 250)] {
        let t = r.tasks.iter().find(|t| t.name == name).ok_or(format!("no figures for {name}"))?;
        if !(lo..=hi).contains(&t.activations) || t.cpu_share_pct <= 0.0 {
            return Err(format!(
                "{name}: {} activations (want {lo}..={hi}), CPU share {:.1} %",
                t.activations, t.cpu_share_pct
            ));
        }
    }
    let shares: Vec<String> =
        r.tasks.iter().map(|t| format!("{} {:.1} %", t.name, t.cpu_share_pct)).collect();
    Ok(format!("CPU shares {}", shares.join(", ")))
}

/// The cgroup v2 case: the groups and their controls work in the guest — the three groups
/// kept the machine busy, their CPU time rises with cpu.weight 50, 100, 150, and a group
/// limited to 10 % of a CPU gets close to it (kselftest's closeness `|a − b| ≤ (a + b)·err/100`,
/// err 10, this project's check). kselftest's own step test (each step within 35 % of the
/// lightest group's time) is printed, not held: Linux on this emulated machine passes or
/// misses it from one build of the guest to the next (docs/linux.md). So is the churn's count
/// of processes that ran after it: here a process of a capped group may not run in that
/// second.
fn cgroups(guest: &Guest, m: &Machine) -> Result<String, String> {
    let _ = guest;
    // Four seconds per case (five cases on three CPUs or more, and the churn): enough for a
    // check that the controls work, short enough for the suite.
    let seconds = 4;
    let r = crate::linux::cgroups::measure(m, Mode::Deterministic, false, seconds)?;
    let u: Vec<f64> = r.weighted.iter().map(|s| s.usage_usec as f64).collect();
    let machine_us = m.cpus as f64 * f64::from(seconds) * 1e6;
    if u.iter().sum::<f64>() < 0.9 * machine_us || u.windows(2).any(|w| w[1] <= w[0]) {
        return Err(format!("CPU time by weight {u:?} µs: not rising with the weight on a busy machine"));
    }
    let step_ok = u.windows(2).all(|w| crate::linux::cgroups::values_close(w[1] - w[0], u[0], 35.0));
    let share = r.limited_share_pct();
    if !crate::linux::cgroups::values_close(share, 10.0, 10.0) || r.limited.nr_throttled == 0 {
        return Err(format!("cpu.max 10 %: {share:.2} %, {} throttled periods", r.limited.nr_throttled));
    }
    let ratios: Vec<String> = r.ratios().iter().map(|x| format!("{x:.3}")).collect();
    let c = r.churn;
    Ok(format!(
        "weights 50:100:150 got {} (kselftest's 35 % step: {}), cpu.max 10 % got {share:.2} %, \
         churn: {} of {} ran after it, {} counted",
        ratios.join(":"),
        if step_ok { "within" } else { "missed" },
        c.ran,
        crate::linux::cgroups::CHURN_TASKS,
        c.counted
    ))
}

/// A case: what it showed, or why it failed.
type LinuxCase = fn(&Guest, &Machine) -> Result<String, String>;

/// The Linux cases on machine `m`, their verdicts printed: (passed, failed). When the guest's
/// packages cannot be had, one line says so and the result is (0, 0), or a failure if the
/// guest was asked for alone (`required`: `cargo xtest --linux`).
pub(crate) fn run(m: &Machine, required: bool) -> (u64, u64) {
    match guest(required) {
        Ok(guest) => {
            let v = verdicts(&guest, m);
            v.print();
            (v.passed, v.failed)
        }
        Err(counts) => counts,
    }
}

/// Debian's guest, fetched if need be; or, when its packages cannot be had, one line saying
/// so and the result to count: (0, 0), or a failure if the guest is `required`.
pub(crate) fn guest(required: bool) -> Result<Guest, (u64, u64)> {
    Guest::prepare().map_err(|line| {
        eprintln!("xtest: the Linux guest is not run: {line}");
        (0, u64::from(required))
    })
}

/// The Linux cases' verdicts, each a line to print.
pub(crate) struct Verdicts {
    pub(crate) passed: u64,
    pub(crate) failed: u64,
    lines: Vec<String>,
}

impl Verdicts {
    /// Prints the verdicts, in the cases' order.
    pub(crate) fn print(&self) {
        for l in &self.lines {
            eprintln!("{l}");
        }
    }
}

/// Runs the Linux cases on `m`; their verdicts are kept, not printed, so that the suite can
/// run them beside its other cases.
pub(crate) fn verdicts(guest: &Guest, m: &Machine) -> Verdicts {
    let mut v = Verdicts { passed: 0, failed: 0, lines: Vec::new() };
    // The longest first, so that the others run beside it.
    let cases: [(&str, LinuxCase); 3] = [
        ("cgroup v2: cpu.weight 50/100/150 and cpu.max 10 %", cgroups),
        ("sysbench cpu, 8 threads, 1000 events", sysbench),
        ("rt-app workloads/periodic.json", periodic),
    ];
    // Deterministic boots, side by side ([`crate::pool`]).
    crate::pool::in_order(
        Mode::Deterministic,
        cases.len(),
        |i| {
            let start = std::time::Instant::now();
            (cases[i].1(guest, m), start.elapsed())
        },
        |i, (verdict, wall)| {
            let name = cases[i].0;
            let case =
                format!("xtest: qemu aarch64 Linux {} [{}/{}] {name}", guest.version(), i + 1, cases.len());
            let line = match verdict {
                Ok(what) => {
                    v.passed += 1;
                    format!("{case} ... ok ({:.1} s: {what})", wall.as_secs_f64())
                }
                Err(why) => {
                    v.failed += 1;
                    format!("{case} ... FAILED: {why}")
                }
            };
            v.lines.push(line);
        },
    );
    v
}
