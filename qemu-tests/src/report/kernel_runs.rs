//! Deterministic QEMU figures of the kernel beyond the seed's experiment: what the slice
//! interrupts do to the wake-up and start lags, and the latency scenario's per-group figures.

use std::time::Duration;

use crate::qemu::{self, number_after_in, Arch, Boot, Machine, Mode};

/// The slice lengths the table compares (`slice_us=`; 0 turns the slices off).
const SLICES_US: [u32; 5] = [0, 25, 50, 100, 250];

/// The sysbench-like run the slice table boots: the seed's workload on its 2x4 clusters,
/// tickless, seed 1.
const SLICE_RUN: &str = "scenario=sysbench threads=8 events=1000 nohz=on seed=1";

/// A deterministic boot of `args` that exited 0 (the suite's, when it booted the same).
fn boot(m: &Machine, args: &str) -> Result<Boot, String> {
    let b = qemu::remembered(m, args, Duration::from_secs(120));
    match b.code {
        Some(0) => Ok(b),
        other => Err(format!("{} `{args}` exited {other:?}", m.arch.name())),
    }
}

/// A report line's number after `key`, or an error naming both.
fn figure(b: &Boot, line: &str, key: &str) -> Result<f64, String> {
    b.line(line)
        .and_then(|l| number_after_in(l, key))
        .ok_or_else(|| format!("no {key:?} in the line {line:?}"))
}

/// The table: per slice length and machine, the wake-up lag, the start lag and the total time.
pub fn slices() -> Result<String, String> {
    let mut out = String::from(
        "| `slice_us` | machine | wake-up lag mean / max (µs) | start lag mean / max (µs) | total time (ms) |\n\
         |---:|---|---:|---:|---:|\n",
    );
    let mut runs = Vec::new();
    for arch in [Arch::Aarch64, Arch::Riscv64] {
        let m = Machine { clusters: 4, ..qemu::prepare(arch)? };
        runs.extend(SLICES_US.map(|us| (m.clone(), us)));
    }
    let boots = crate::pool::map(Mode::Deterministic, runs.len(), |k| {
        boot(&runs[k].0, &format!("{SLICE_RUN} slice_us={}", runs[k].1))
    });
    for ((m, us), b) in runs.iter().zip(boots) {
        let b = b?;
        let [wake, start] = ["wake-up lag", "start lag"].map(|l| -> Result<String, String> {
            Ok(format!("{} / {}", figure(&b, l, "mean")?, figure(&b, l, "max")?))
        });
        let total = figure(&b, "total time", "total time")? / 1000.0;
        out.push_str(&format!("| {us} | {} | {} | {} | {total:.2} |\n", m.arch.name(), wake?, start?));
    }
    Ok(out)
}

/// The latency scenario's figures on both `virt` machines (HZ 1000, CFS then EEVDF in one
/// boot), per machine, policy and group.
pub fn latency() -> Result<String, String> {
    let machines: Vec<Machine> =
        [Arch::Aarch64, Arch::Riscv64].into_iter().map(qemu::prepare).collect::<Result<_, _>>()?;
    let boots = crate::pool::map(Mode::Deterministic, machines.len(), |i| {
        boot(&machines[i], "scenario=latency hz=1000")
    });
    let mut out = String::from(
        "| machine | policy | group | wake-ups | wake-to-run mean / p50 / p99 / max (µs) | CPU share of the machine (%) |\n\
         |---|---|---|---:|---:|---:|\n",
    );
    for (m, b) in machines.iter().zip(boots) {
        latency_rows(&mut out, m.arch, &b?)?;
    }
    Ok(out)
}

/// One boot's rows of the latency table.
fn latency_rows(out: &mut String, arch: Arch, b: &Boot) -> Result<(), String> {
    for policy in ["cfs", "eevdf"] {
        for group in ["short slice", "default slice"] {
            let line = format!("latency: {policy}: {group}:");
            let l = b.line(&line).ok_or_else(|| format!("no line {line:?}"))?;
            let n = |k: &str| number_after_in(l, k).ok_or_else(|| format!("no {k:?} in {l:?}"));
            let wakeups =
                number_after_in(l, &format!("{group}:")).ok_or_else(|| format!("no count in {l:?}"))?;
            out.push_str(&format!(
                "| {} | {} | {group} | {wakeups} | {} / {} / {} / {} | {:.2} |\n",
                arch.name(),
                policy.to_uppercase(),
                n("mean")?,
                n("p50")?,
                n("p99")?,
                n("max")?,
                n("CPU share")?
            ));
        }
    }
    Ok(())
}
