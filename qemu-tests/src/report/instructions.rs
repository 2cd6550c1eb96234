//! `cargo xreport --timings`'s instruction counts: what one simulated tick costs, whole and by
//! part, counted by callgrind on the speed bench's smallest machine
//! (`sim/examples/spinners.rs`). The counts follow the compiler, the host's instruction set
//! and libc, not its load; they are taken with the timings, stamped, and not checked.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::qemu;

/// The runs of 100 ms counted; their difference is the steady state without the set-up.
const RUNS: [u64; 2] = [200, 400];

/// The parts counted: what each is, and the function (a callgrind pattern: `*` is any text,
/// the whole name must match) whose calls count, with all they call.
const PARTS: [(&str, &str); 3] = [
    (
        "the core's tick (`Smp::tick`: update_curr, PELT, the preemption check, the periodic \
         balance when due)",
        "sched_core::smp::switch::*::tick",
    ),
    (
        "the switch (the simulator's `reschedule`: `schedule`, `finish_switch`, and its own \
         accounting and re-arming)",
        "sched_sim::machine::Machine*::reschedule",
    ),
    ("of which `schedule` (put_prev, pick, set_next)", "sched_core::smp::switch::*::schedule"),
];

/// valgrind, found or installed: `cargo xreport` asks before any section runs, so that a
/// missing tool does not cost the benchmarks' minutes.
pub fn ready() -> Result<PathBuf, String> {
    qemu::find_or_install_tool("valgrind", "valgrind")
}

/// Counts the example's instructions at each of [`RUNS`], whole and in each of [`PARTS`], and
/// returns the section's body.
pub fn section() -> Result<String, String> {
    let valgrind = ready()?;
    let target = qemu::root().join("target");
    let status = crate::cargo()
        .args(["build", "--quiet", "--release", "-p", "sched-sim", "--example", "spinners"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(qemu::root())
        .status()
        .map_err(|e| format!("cargo build: {e}"))?;
    if !status.success() {
        return Err("cargo build -p sched-sim --example spinners failed".into());
    }
    let example = target.join("release/examples/spinners");
    eprintln!(
        "xreport: callgrind, {} and {} runs of 100 ms, whole and in {} parts",
        RUNS[0],
        RUNS[1],
        PARTS.len()
    );
    let mut ticks = 0;
    let mut per_tick = |part: Option<&str>| -> Result<f64, String> {
        let a = count(&valgrind, &example, RUNS[0], part)?;
        let b = count(&valgrind, &example, RUNS[1], part)?;
        ticks = b.1.checked_sub(a.1).filter(|&t| t > 0).ok_or("the longer run took no more ticks")?;
        steady(a.0, b.0, ticks, part)
    };
    let whole = per_tick(None)?;
    let parts = PARTS.iter().map(|(_, f)| per_tick(Some(f))).collect::<Result<Vec<f64>, String>>()?;
    let rest = whole - parts[0] - parts[1];
    if rest < 0.0 || parts[2] > parts[1] {
        return Err(format!(
            "the parts do not nest (whole {whole:.0}, tick {:.0}, switch {:.0}, schedule {:.0}): \
             a pattern matches more than its function",
            parts[0], parts[1], parts[2]
        ));
    }
    let version = Command::new(&valgrind)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|_| "valgrind".into());
    let mut body = format!(
        "Counted {} with {version}: `cargo run --release -p sched-sim --example spinners -- N` (8 \
         CPUs × 4 pinned spinners, HZ 250) under callgrind at N = {} and {} runs of 100 ms, the \
         difference divided by the {ticks} simulated ticks between (the example counts them). A \
         part counts its function's calls with everything they call (`--toggle-collect`); a \
         switch comes about every other tick.\n\n\
         | part | instructions per simulated tick |\n|---|---:|\n| a simulated tick, whole | {whole:.0} |\n",
        super::timings::when_where(),
        RUNS[0],
        RUNS[1]
    );
    for ((what, _), n) in PARTS.iter().zip(&parts) {
        body.push_str(&format!("| {what} | {n:.0} |\n"));
    }
    body.push_str(&format!("| the simulator's event loop around them (the rest) | {rest:.0} |\n"));
    Ok(body)
}

/// Instructions per tick from two runs' counts `a` and `b` and the `ticks` between them; an
/// error when the part's pattern matched nothing or the longer run counted no more.
fn steady(a: u64, b: u64, ticks: u64, part: Option<&str>) -> Result<f64, String> {
    match part {
        Some(p) if b == 0 => Err(format!(
            "no function matched --toggle-collect={p} (its symbol's name changed: mangling or inlining?)"
        )),
        _ if b <= a => Err(format!(
            "callgrind counted no more in {} runs than in {} ({})",
            RUNS[1],
            RUNS[0],
            part.unwrap_or("the whole run")
        )),
        _ => Ok((b - a) as f64 / ticks as f64),
    }
}

/// `runs` runs of the example under callgrind: the instructions it counts (all of them, or
/// with `part` only those inside that function's calls) and the ticks the example reports.
fn count(valgrind: &Path, example: &Path, runs: u64, part: Option<&str>) -> Result<(u64, u64), String> {
    let mut cmd = Command::new(valgrind);
    cmd.arg("--tool=callgrind").arg("--callgrind-out-file=/dev/null");
    if let Some(f) = part {
        cmd.arg("--collect-atstart=no").arg(format!("--toggle-collect={f}"));
    }
    let o = cmd.arg(example).arg(runs.to_string()).output().map_err(|e| format!("valgrind: {e}"))?;
    let stderr = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
        return Err(format!("valgrind --tool=callgrind spinners {runs}: {}: {}", o.status, tail.join(" | ")));
    }
    let instructions = collected(&stderr)
        .ok_or_else(|| format!("callgrind reported no count for {}", part.unwrap_or("the whole run")))?;
    let ticks = ticks_of(&String::from_utf8_lossy(&o.stdout)).ok_or("the example printed no tick count")?;
    Ok((instructions, ticks))
}

/// The count of callgrind's `Collected : N` line.
fn collected(stderr: &str) -> Option<u64> {
    stderr.lines().find_map(|l| l.split("Collected :").nth(1)?.trim().parse().ok())
}

/// The ticks of the example's line `spinners: ..., N ticks`.
fn ticks_of(stdout: &str) -> Option<u64> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("spinners: ")?.strip_suffix(" ticks")?.rsplit(' ').next()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counts_are_read_from_callgrind_and_the_example() {
        let stderr = "==9747== Events    : Ir\n==9747== Collected : 30361414\n==9747==\n==9747== I   refs:      30,361,414\n";
        assert_eq!(collected(stderr), Some(30_361_414));
        assert_eq!(collected("==1== Collected : 0\n"), Some(0));
        assert_eq!(collected("==1== I   refs: 5\n"), None);
        assert_eq!(collected("==1== Collected : many\n"), None);
        assert_eq!(ticks_of("spinners: 8 CPUs x 4 spinners, 300 ms simulated, 600 ticks\n"), Some(600));
        assert_eq!(ticks_of("spinners: 8 CPUs x 4 spinners, 300 ms simulated\n"), None);
    }

    #[test]
    fn a_part_that_matched_nothing_is_an_error_not_a_zero() {
        assert_eq!(steady(30_000_000, 60_360_000, 40_000, Some("tick")), Ok(759.0));
        let none = steady(0, 0, 40_000, Some("sched_core::smp::switch::*::tick")).unwrap_err();
        assert!(
            none.contains("no function matched --toggle-collect=sched_core::smp::switch::*::tick"),
            "{none}"
        );
        assert!(steady(5, 5, 40_000, None).unwrap_err().contains("the whole run"));
        assert!(steady(7, 5, 40_000, Some("p")).unwrap_err().contains("no more"));
    }
}
