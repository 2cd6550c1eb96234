//! `cargo xrun --linux`: Linux's rows beside the kernel's and the simulator's, measured in the
//! same run on the same QEMU machine, and the realism table (each platform's median as a ratio
//! of Linux's).

use std::time::Duration;

use sched_sim::stats::summary;

use crate::linux::{self, measure, Guest, Job};
use crate::qemu::{Machine, Mode};

/// One platform's figures: (row name, one value per run).
pub type Rows = Vec<(String, Vec<f64>)>;

/// Linux's side of an experiment.
pub struct LinuxTable {
    /// What ran (release, machine, mode), for the heading.
    pub heading: String,
    /// The sched domains Linux built (CPU 0's levels).
    pub domains: String,
    /// The figures.
    pub rows: Rows,
}

/// The boot's time limit: generous, since a run of sysbench or rt-app in deterministic mode on
/// 16 vCPUs takes a few host seconds, the boot ~5 s.
fn limit(runs: u32) -> Duration {
    Duration::from_secs(120 + 30 * u64::from(runs))
}

/// sysbench `threads`/`events` on Linux on machine `m`, `runs` times in one boot: the rows of
/// the kernel's table that a trace measures (failed balance attempts are the kernel's own
/// count; Linux's schedstats are not read).
pub fn sysbench(
    m: &Machine,
    mode: Mode,
    ticking: bool,
    threads: u32,
    events: u32,
    runs: u32,
) -> Result<LinuxTable, String> {
    let guest = Guest::prepare()?.ticking(ticking);
    eprintln!("xrun: Linux {} on QEMU, {runs} sysbench runs in one boot", guest.version());
    let console = guest.boot(m, mode, &Job::Sysbench { threads, events }, runs, limit(runs))?;
    let mut figures = Vec::new();
    for (i, run) in console.runs.iter().enumerate() {
        let f = measure::sysbench(run, m.cpus, threads as usize)
            .map_err(|why| format!("Linux's sysbench run {}: {why}", i + 1))?;
        figures.push(f);
    }
    // The seed-style table's rows; the failed balance attempts are the kernel's own count.
    let rows: Vec<(String, Vec<f64>)> = crate::sysbench_figures::ROWS
        .iter()
        .map(|(n, get)| (n.to_string(), figures.iter().map(get).collect::<Vec<f64>>()))
        .filter(|(_, v)| v.iter().any(|x| !x.is_nan()))
        .collect();
    Ok(LinuxTable {
        heading: format!(
            "Linux {} (Debian, CFS) on the same QEMU machine ({} vCPUs, {} mode{}), sysbench cpu --threads={threads} --events={events}, {runs} runs in one boot",
            console.release,
            m.cpus,
            mode.name(),
            if ticking { ", idle CPUs ticking: nohz=off skew_tick=1" } else { "" }
        ),
        domains: console.domain_line(),
        rows,
    })
}

/// rt-app on Linux on machine `m`: the workload file `name` (its text, lowered to `def`),
/// `runs` runs in one boot, each measured as the kernel's runs are; and the heading and
/// domains of Linux's table.
pub fn rtapp(
    m: &Machine,
    mode: Mode,
    ticking: bool,
    name: &str,
    text: &str,
    def: &sched_workload::ProgramDef,
    runs: u32,
) -> Result<(Vec<sched_sim::machine::RunReport>, String, String), String> {
    let guest_file = sched_workload::rtapp::linux::guest_json(text).map_err(|e| format!("{name}: {e}"))?;
    for path in &guest_file.left_out {
        eprintln!(
            "xrun: {name}: {path} left out of Linux's file (Linux 6.1 is CFS, which takes no slice request)"
        );
    }
    let json = guest_file.json;
    let guest = Guest::prepare()?.ticking(ticking);
    eprintln!("xrun: Linux {} on QEMU, {runs} rt-app runs of {name} in one boot", guest.version());
    let console = guest.boot(m, mode, &Job::RtApp { json: json.as_bytes() }, runs, limit(runs))?;
    let mut reports = Vec::new();
    for (i, run) in console.runs.iter().enumerate() {
        let r = linux::rtapp::measure(run, def, m.cpus)
            .map_err(|why| format!("Linux's rt-app run {}: {why}", i + 1))?;
        reports.push(sched_sim::machine::RunReport {
            length_ns: r.run_ns,
            tasks: r.tasks,
            migrations: r.migrations,
            ..Default::default()
        });
    }
    let heading = format!(
        "Linux {} (Debian, CFS) on the same QEMU machine ({} vCPUs, {} mode{}), rt-app 1.0 {name}, {runs} runs in one boot",
        console.release,
        m.cpus,
        mode.name(),
        if ticking { ", idle CPUs ticking: nohz=off skew_tick=1" } else { "" }
    );
    Ok((reports, heading, console.domain_line()))
}

/// Prints Linux's rows: median [min–max] per figure.
pub fn print(side: &LinuxTable) {
    println!("{}", side.heading);
    println!("Linux's sched domains (CPU 0): {}", side.domains);
    for (name, v) in &side.rows {
        println!("{name:<26} {:>28}", summary(v));
    }
}

/// The median of `v`'s finite values (a figure a run did not have is NaN).
fn median(v: &[f64]) -> f64 {
    let finite: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    sched_sim::stats::median(&finite)
}

/// The realism table: for every figure Linux has, each column's median over Linux's median,
/// then a blank line. `columns`: (short label, rows) of the kernel's and the simulator's
/// sides; `legend` says what the labels are.
pub fn realism(linux: &Rows, columns: &[(&str, &Rows)], legend: &str) -> String {
    let mut s = format!("Realism: each median as a ratio of Linux's median (1.00 = as Linux; {legend})\n");
    let w = linux.iter().map(|(n, _)| n.chars().count()).max().unwrap_or(0).max(26);
    s += &format!("{:<w$}", "");
    for (label, _) in columns {
        s += &format!(" {label:>14}");
    }
    s.push('\n');
    for (name, lv) in linux {
        let l = median(lv);
        s += &format!("{name:<w$}");
        for (_, rows) in columns {
            let cell = match rows.iter().find(|(n, _)| n == name).map(|(_, v)| median(v)) {
                Some(m) if l != 0.0 && l.is_finite() && m.is_finite() => format!("{:.2}", m / l),
                Some(m) if l == 0.0 && m == 0.0 => "both 0".into(),
                Some(_) if l == 0.0 => "Linux 0".into(),
                _ => "—".into(),
            };
            s += &format!(" {cell:>14}");
        }
        s.push('\n');
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn realism_divides_medians_and_marks_what_a_side_lacks() {
        let linux: Rows =
            vec![("spread time (ms)".into(), vec![2.0, 4.0, 100.0]), ("total time (ms)".into(), vec![0.0])];
        let kernel: Rows = vec![("spread time (ms)".into(), vec![8.0, 8.0, 8.0])];
        let t = realism(&linux, &[("kernel", &kernel)], "kernel = the QEMU kernel");
        assert!(t.lines().nth(2).unwrap().ends_with("2.00"), "{t}");
        assert!(t.lines().nth(3).unwrap().ends_with("—"), "{t}");
        assert!(t.ends_with("\n\n"), "a blank line ends it");
        assert_eq!(median(&[3.0, 1.0, f64::NAN, 2.0]), 2.0);
    }
}
