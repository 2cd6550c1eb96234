//! `cargo xreport --timings`'s instruction counts: what one simulated tick costs, whole and by
//! part, counted by callgrind on the speed bench's smallest machine
//! (`sim/examples/spinners.rs`). The counts follow the compiler, the host's instruction set
//! and libc, not its load; they are taken with the timings, stamped, and not checked.

use std::path::Path;
use std::process::Command;

use crate::qemu;

/// The runs of 100 ms counted; their difference is the steady state without the set-up.
const RUNS: [u64; 2] = [200, 400];
/// Simulated ticks per run: 8 CPUs, 25 ticks each at HZ 250.
const TICKS_PER_RUN: u64 = 8 * 25;

/// The parts counted: what each is, and the function (a callgrind pattern) whose calls count,
/// with all they call.
const PARTS: [(&str, &str); 3] = [
    (
        "the core's tick (`Smp::tick`: update_curr, PELT, the preemption check, the balance trigger)",
        "sched_core::smp::switch::*::tick",
    ),
    (
        "the switch (the simulator's `reschedule`: `schedule`, `finish_switch` and its records)",
        "sched_sim::machine::Machine*::reschedule",
    ),
    ("of which `schedule` (put_prev, pick, set_next)", "sched_core::smp::switch::*::schedule"),
];

/// Counts the example's instructions at each of [`RUNS`], whole and in each of [`PARTS`], and
/// returns the section's body.
pub fn section() -> Result<String, String> {
    let valgrind = qemu::find_or_install_tool("valgrind", "valgrind")?;
    let status = crate::cargo()
        .args(["build", "--quiet", "--release", "-p", "sched-sim", "--example", "spinners"])
        .current_dir(qemu::root())
        .status()
        .map_err(|e| format!("cargo build: {e}"))?;
    if !status.success() {
        return Err("cargo build -p sched-sim --example spinners failed".into());
    }
    let example = qemu::root().join("target/release/examples/spinners");
    let out = qemu::root().join("target/xreport-callgrind.out");
    let ticks = (RUNS[1] - RUNS[0]) * TICKS_PER_RUN;
    // Per tick: the difference between the two runs' counts over the ticks between them.
    let per_tick = |part: Option<&str>| -> Result<f64, String> {
        let [a, b] = RUNS.map(|runs| count(&valgrind, &example, runs, part, &out));
        let (a, b) = (a?, b?);
        if b <= a {
            return Err(format!("callgrind counted nothing more in {} runs than in {}", RUNS[1], RUNS[0]));
        }
        Ok((b - a) as f64 / ticks as f64)
    };
    eprintln!(
        "xreport: callgrind, {} and {} runs of 100 ms, whole and in {} parts",
        RUNS[0],
        RUNS[1],
        PARTS.len()
    );
    let whole = per_tick(None)?;
    let parts = PARTS.iter().map(|(_, f)| per_tick(Some(f))).collect::<Result<Vec<f64>, String>>()?;
    let _ = std::fs::remove_file(&out);
    let version = Command::new(&valgrind)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|_| "valgrind".into());
    let mut body = format!(
        "Counted {} with {version}: `cargo run --release -p sched-sim --example spinners -- N` (8 \
         CPUs × 4 pinned spinners) under callgrind at N = {} and {} runs of 100 ms, the difference \
         divided by the {ticks} simulated ticks between. A part counts its function's calls with \
         everything they call (`--toggle-collect`).\n\n\
         | part | instructions per simulated tick |\n|---|---:|\n| a simulated tick, whole | {whole:.0} |\n",
        super::timings::when_where(),
        RUNS[0],
        RUNS[1]
    );
    for ((what, _), n) in PARTS.iter().zip(&parts) {
        body.push_str(&format!("| {what} | {n:.0} |\n"));
    }
    let rest = whole - parts[0] - parts[1];
    body.push_str(&format!("| the simulator's event loop around them (the rest) | {rest:.0} |\n"));
    Ok(body)
}

/// The instructions callgrind counts in `runs` runs of the example: all of them, or with
/// `part` only those inside that function's calls. The profile goes to `out`.
fn count(valgrind: &Path, example: &Path, runs: u64, part: Option<&str>, out: &Path) -> Result<u64, String> {
    let mut cmd = Command::new(valgrind);
    cmd.arg("--tool=callgrind").arg(format!("--callgrind-out-file={}", out.display()));
    if let Some(f) = part {
        cmd.arg("--collect-atstart=no").arg(format!("--toggle-collect={f}"));
    }
    let o = cmd.arg(example).arg(runs.to_string()).output().map_err(|e| format!("valgrind: {e}"))?;
    if !o.status.success() {
        return Err(format!("valgrind --tool=callgrind {} {runs}: {}", example.display(), o.status));
    }
    collected(&String::from_utf8_lossy(&o.stderr))
        .ok_or_else(|| format!("callgrind reported no count for {}", part.unwrap_or("the whole run")))
}

/// The count of callgrind's `Collected : N` line.
fn collected(stderr: &str) -> Option<u64> {
    stderr.lines().find_map(|l| l.split("Collected :").nth(1)?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_is_read_from_callgrinds_report() {
        let stderr = "==9747== Events    : Ir\n==9747== Collected : 30361414\n==9747==\n==9747== I   refs:      30,361,414\n";
        assert_eq!(collected(stderr), Some(30_361_414));
        assert_eq!(collected("==1== I   refs: 5\n"), None);
        assert_eq!(collected("==1== Collected : many\n"), None);
    }
}
