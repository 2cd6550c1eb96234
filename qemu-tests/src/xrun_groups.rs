//! `cargo xrun --groups`: the task-group cases (kselftest `test_cpu.c`'s shapes and LTP's
//! `cfs_bandwidth01` churn) side by side — the kernel's `scenario=groups` on QEMU, the
//! simulator's `cargo xsim groups`, and with `--linux` Linux's cgroup v2 on the same QEMU
//! machine — each row's target beside what each got. The measures (share, CPUs' worth) are
//! defined once, in docs/groups.md.

use std::fmt::Write as _;
use std::time::Duration;

use crate::linux::cgroups;
use crate::qemu::{self, Boot, Machine, Mode};
use crate::suite::{group_cap, group_share};
use sched_sim::groups::Measure;

/// One row of the table: its case, group, measure and target.
struct Row {
    case: &'static str,
    group: &'static str,
    measure: Measure,
    target: f64,
}

/// The rows, in the order every side runs its cases (`under` only on three CPUs or more).
fn rows(cpus: usize) -> Vec<Row> {
    let row = |case, group, measure, target| Row { case, group, measure, target };
    let mut all = vec![
        row("weights", "cpu.weight 50", Measure::Share, 50.0 / 300.0),
        row("weights", "cpu.weight 100", Measure::Share, 100.0 / 300.0),
        row("weights", "cpu.weight 150", Measure::Share, 150.0 / 300.0),
    ];
    if cpus >= 3 {
        for w in ["cpu.weight 50", "cpu.weight 100", "cpu.weight 150"] {
            all.push(row("under", w, Measure::CpusWorth, 1.0));
        }
    }
    all.extend([
        row("nested", "B (1000)", Measure::Share, 0.5),
        row("nested", "A (1000) / A1 (250)", Measure::Share, 0.125),
        row("nested", "A (1000) / A2 (750)", Measure::Share, 0.375),
        row("many", "the many threads", Measure::Share, 0.5),
        row("many", "1 thread", Measure::Share, 0.5),
        row("cap", "cpu.max 10000 100000", Measure::CpusWorth, 0.1),
        row("churn", "tasks that ran after it", Measure::Tasks, f64::from(cgroups::CHURN_TASKS)),
        row("churn", "tasks the groups count", Measure::Tasks, f64::from(cgroups::CHURN_TASKS)),
    ]);
    all
}

/// The kernel's figures, in [`rows`]' order (`None` where its log has none).
fn kernel_column(b: &Boot, cpus: usize) -> Vec<Option<f64>> {
    let share = |case: &str, group: &str| group_share(b, case, group).ok().map(|p| p / 100.0);
    let under = |w: u32| b.number_after(&format!("groups: under: cpu.weight {w}:"));
    let churn = b.line("groups: churn:");
    let churn_after = |k: &str| churn.and_then(|l| qemu::number_after_in(l, k));
    let mut col = vec![
        share("weights", "cpu.weight 50"),
        share("weights", "cpu.weight 100"),
        share("weights", "cpu.weight 150"),
    ];
    if cpus >= 3 {
        col.extend([under(50), under(100), under(150)]);
    }
    col.extend([
        share("nested", "B"),
        share("nested", "A/A1"),
        share("nested", "A/A2"),
        share("many", "40 threads"),
        share("many", "1 thread"),
        group_cap(b).ok().map(|(worth, _, _)| worth),
        churn_after("churn:"),
        churn_after("second,"),
    ]);
    col
}

/// The simulator's figures, in [`rows`]' order: its rows come in the same order, one case's
/// groups after another (its churn case adds the two task counts).
fn sim_column(rows: &[sched_sim::groups::GroupRow]) -> Vec<Option<f64>> {
    rows.iter().map(|r| Some(r.got)).collect()
}

/// Linux's figures, in [`rows`]' order.
fn linux_column(m: &cgroups::Measured) -> Vec<Option<f64>> {
    let mut col: Vec<Option<f64>> = m.rows().iter().map(|r| Some(r.got)).collect();
    col.extend([Some(f64::from(m.churn.ran)), Some(f64::from(m.churn.counted))]);
    col
}

/// A figure in its row's unit, with its error against the target.
fn cell(row: &Row, v: Option<f64>) -> String {
    let Some(v) = v else { return "—".to_string() };
    let err = (v / row.target - 1.0) * 100.0;
    match row.measure {
        Measure::Share => format!("{:.2} % ({err:+.1}%)", v * 100.0),
        Measure::CpusWorth => format!("{v:.3} ({err:+.1}%)"),
        Measure::Tasks => format!("{v:.0}"),
    }
}

/// The table: one row per group, its target, then each side's figure.
fn render(cpus: usize, columns: &[(&str, Vec<Option<f64>>)]) -> String {
    let mut s = String::new();
    let _ = write!(s, "{:<8} {:<24} {:>8}", "case", "group", "target");
    for (name, _) in columns {
        let _ = write!(s, " {name:>18}");
    }
    s += "\n";
    for (i, r) in rows(cpus).iter().enumerate() {
        let target = match r.measure {
            Measure::Share => format!("{:.2} %", r.target * 100.0),
            Measure::CpusWorth => format!("{:.3}", r.target),
            Measure::Tasks => format!("{:.0}", r.target),
        };
        let _ = write!(s, "{:<8} {:<24} {target:>8}", r.case, r.group);
        for (_, col) in columns {
            let _ = write!(s, " {:>18}", cell(r, col.get(i).copied().flatten()));
        }
        s += "\n";
    }
    s
}

/// Runs the three sides for `seconds` per case on `m` (Linux only if `linux`; the kernel's boot
/// line ends with `words`: its HZ, feature switches and capacities) and prints the table.
/// `Err` is one line.
pub(crate) fn main(
    m: &Machine,
    mode: Mode,
    ticking: bool,
    linux: bool,
    seconds: u32,
    words: &str,
    sim: &sched_sim::Config,
) -> Result<(), String> {
    let mut columns = Vec::new();
    let mut periods = Vec::new();
    let mut linux_release = None;
    if linux {
        eprintln!("xrun: Linux cgroup v2 in the guest, {seconds} s per case ...");
        let l = cgroups::measure(m, mode, ticking, seconds)?;
        linux_release = Some(l.release.clone());
        periods.push(("Linux", (l.limited.nr_periods as f64, l.limited.nr_throttled as f64)));
        columns.push(("Linux", linux_column(&l)));
    }
    eprintln!("xrun: the kernel's scenario=groups on QEMU, {seconds} s per case ...");
    // (`qemu::boot` adds the machine's own words, `clusters=` where QEMU cannot say it.)
    let line = format!(
        "scenario=groups duration_ms={} {} nohz={}",
        seconds * 1000,
        words,
        if ticking { "off" } else { "on" },
    );
    // A window per case (weights, under, many, capped, the churn) and per nested round, each
    // with a warm-up of a quarter of it; seven host seconds per simulated one cover that and
    // deterministic mode's slowdown, and the fixed part the boot and the churn's calm second.
    let windows = 5 + crate::kernel_doc::nested_rounds();
    let b = qemu::boot(m, &line, mode, Duration::from_secs(120 + 7 * windows * u64::from(seconds)));
    if b.code != Some(0) {
        let last: Vec<&str> = b.lines.iter().rev().take(3).map(String::as_str).collect();
        return Err(format!("the kernel's {line:?} failed (exit {:?}): {}", b.code, last.join(" | ")));
    }
    if let Ok((_, p, t)) = group_cap(&b) {
        periods.push(("kernel", (p, t)));
    }
    columns.push(("kernel (QEMU)", kernel_column(&b, m.cpus)));
    eprintln!("xrun: the simulator's groups, {seconds} s per case ...");
    if sim.cpus > 64 {
        return Err("the simulator's groups run on at most 64 CPUs".into());
    }
    let sim_rows = sched_sim::groups::run_groups(sim, u64::from(seconds));
    if let Some((p, t)) = sim_rows.iter().find_map(|r| r.periods) {
        periods.push(("simulator", (p as f64, t as f64)));
    }
    columns.push(("simulator", sim_column(&sim_rows)));
    print!(
        "Task groups: {} vCPUs, {} mode, {seconds} s per case{}",
        m.cpus,
        mode.name(),
        linux_release.map(|r| format!(", Linux {r} (Debian) in the guest")).unwrap_or_default()
    );
    println!("; share: of the case's CPU time, CPUs' worth: of its wall time (docs/groups.md)");
    print!("{}", render(m.cpus, &columns));
    let p: Vec<String> = periods.iter().map(|(n, (p, t))| format!("{n} {t:.0} of {p:.0}")).collect();
    println!("cap: periods throttled (nr_throttled of nr_periods): {}", p.join(", "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The simulator's rows line up with the table's, case by case and group by group (so a
    /// column never shifts).
    #[test]
    fn the_simulators_rows_line_up() {
        for cpus in [2, 8] {
            let cfg = sched_sim::Config {
                cpus,
                topology: sched_sim::machine::TopologyKind::Flat,
                ..sched_sim::Config::octo(1)
            };
            let sim = sched_sim::groups::run_groups(&cfg, 1);
            let ours = rows(cpus);
            assert_eq!(sim.len(), ours.len(), "{cpus} CPUs");
            for (s, o) in sim.iter().zip(&ours) {
                assert!(
                    (s.target - o.target).abs() < 1e-9,
                    "{} / {} against {} / {}",
                    s.case,
                    s.group,
                    o.case,
                    o.group
                );
            }
        }
    }
}
