//! `cargo xrun`'s traced runs: the kernel's switch log read back as a trace (Perfetto JSON and
//! an SVG timeline, checked by [`sched_sim::trace_check`]), the A/B pictures of the seed's rule
//! off and on in QEMU and in the simulator, and each worker's story in both.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sched_core::Features;
use sched_sim::trace_check::{check_chrome_trace, verdict};

use crate::qemu::{self, Boot, Machine, Mode};

/// Writes one of the run's files, or says in one line why it could not (the run's tables
/// stand without it). Whether it was written.
pub(crate) fn write_file(path: &Path, text: impl AsRef<[u8]>) -> bool {
    match std::fs::write(path, text) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("xrun: cannot write {}: {e}", path.display());
            false
        }
    }
}

/// What the traced runs need: the machine and mode, the boot lines of the rule-on and
/// rule-off runs (seed 1, tracing on), the experiment's one-line description, where the files
/// go, and the simulator's machine and workload for the same pictures.
pub(crate) struct Traced<'a> {
    pub(crate) machine: &'a Machine,
    pub(crate) mode: Mode,
    pub(crate) on_cmd: String,
    pub(crate) off_cmd: String,
    pub(crate) desc: String,
    pub(crate) out: PathBuf,
    /// The kernel runs the simulator's sysbench file (whose main thread is the kernel's second).
    pub(crate) file: bool,
    pub(crate) cfg: &'a sched_sim::Config,
    pub(crate) workload: &'a sched_sim::Workload,
    pub(crate) features: Features,
}

/// How long a traced boot may take: a hang's catch, not a speed check. Logging every switch
/// makes a run slower than its untraced twin, and a failed traced run fails the command.
const TRACED_LIMIT: Duration = Duration::from_secs(300);

/// `sched_sim::trace_check` of the Chrome JSON made of a QEMU run's `log`: every vCPU that
/// switched must show up as a scheduling track (docs/trace-formats.md); with fewer threads
/// than CPUs, some never switch. (Counted from the log the JSON is made of, so this part
/// checks the conversion; the format checks check the rest.)
pub(crate) fn check_qemu_trace(
    log: &sched_sim::trace::TraceLog,
    json: &str,
) -> sched_sim::trace_check::TraceCheck {
    let switched: std::collections::BTreeSet<usize> = log.switches.iter().map(|s| s.cpu).collect();
    check_chrome_trace(json, switched.len())
}

/// Whether traced boot `b` of `cmd` ran to its end with exit 0, or why not.
fn ran_through(b: &Boot, cmd: &str) -> Result<(), String> {
    match (b.timed_out, b.code) {
        (false, Some(0)) => Ok(()),
        (true, _) => Err(format!("the traced run timed out: {cmd}")),
        (false, code) => Err(format!("the traced run ended with exit {code:?}: {cmd}")),
    }
}

/// Boots the traced runs and writes the trace, the timelines, the pictures and the stories
/// into `t.out`, saying each file on a line. Refused (with why, after drawing what it could)
/// when a traced run did not end with exit 0 or the QEMU trace fails its check.
pub(crate) fn traced_runs(t: &Traced<'_>) -> Result<(), String> {
    let Traced { machine, mode, desc, file, features, .. } = t;
    let arch = machine.arch;
    let mut wrong = Vec::new();
    // A trace of one QEMU run (rule on, first seed) from the kernel's switch log.
    let cmd = &t.on_cmd;
    let b = qemu::boot(machine, cmd, *mode, TRACED_LIMIT);
    wrong.extend(ran_through(&b, cmd).err());
    let log = qemu_trace(&b, machine.cpus);
    if log.switches.is_empty() {
        println!("no trace of the QEMU run: the traced run logged no context switches (exit {:?})", b.code);
    } else {
        let end = log.switches.last().map_or(0, |s| s.time);
        let other = serde_json::json!({ "source": "kernel-shim under QEMU", "arch": arch.name(), "command_line": cmd, "mode": mode.name() });
        let (j, s) = (t.out.join("qemu-trace.json"), t.out.join("qemu-timeline.svg"));
        let svg =
            log.svg(&format!("kernel-shim on QEMU {} ({} mode): {cmd}", arch.name(), mode.name()), 0, end);
        let json = log.chrome_json(other);
        if write_file(&j, &json) && write_file(&s, svg) {
            println!(
                "trace of one QEMU run (rule on): {} (open in ui.perfetto.dev), timeline: {}",
                j.display(),
                s.display()
            );
        }
        let check = check_qemu_trace(&log, &json);
        println!("trace check (sched_sim::trace_check) of the QEMU trace: {}", verdict(&check));
        if check.is_err() {
            wrong.push(format!("the QEMU trace fails its check: {}", verdict(&check)));
        }
    }
    // The A/B pictures: rule off above rule on, the same seed, one time axis.
    let off_boot = qemu::boot(machine, &t.off_cmd, *mode, TRACED_LIMIT);
    wrong.extend(ran_through(&off_boot, &t.off_cmd).err());
    let off = qemu_trace(&off_boot, machine.cpus);
    let from = log.switches.iter().chain(&off.switches).map(|s| s.time).min().unwrap_or(0);
    let to = log.switches.iter().chain(&off.switches).map(|s| s.time).max().unwrap_or(from);
    let window = sched_sim::picture::window;
    // The kernel's main thread is the first thread (slot 0); running the file, the file's main
    // thread (sysbench's) is the second; the workers are the others.
    let qemu_worker: sched_sim::picture::IsWorker =
        if *file { |n| n != "thread0" && n != "thread1" } else { |n| n != "thread0" };
    let spreads = [&off, &log].map(|l| sched_sim::picture::spread_instant(l, qemu_worker));
    let svg = sched_sim::picture::ab_svg(
        &format!("kernel-shim on QEMU {} ({} mode), seed 1: {desc}", arch.name(), mode.name()),
        &sched_sim::picture::Side { label: "without the rule (pre-patch)", log: &off },
        &sched_sim::picture::Side { label: "with the rule (c32b4308)", log: &log },
        from,
        window(spreads, from, to),
        qemu_worker,
    );
    let sim = sched_sim::picture::sim_ab(
        t.cfg,
        t.workload,
        (*features - Features::UTIL_PULL_SKIPS_LONE_TASK, "without the rule (pre-patch)"),
        (*features | Features::UTIL_PULL_SKIPS_LONE_TASK, "with the rule (c32b4308)"),
        &format!("the simulator, seed 1: {desc}"),
    );
    let (sim_svg, sim_on) = match sim {
        Some((svg, on)) => (Some(svg), Some(on)),
        None => (None, None),
    };
    let (qa, sa) = (t.out.join("qemu-ab.svg"), t.out.join("sim-ab.svg"));
    if write_file(&qa, svg) && sim_svg.is_some_and(|s| write_file(&sa, s)) {
        println!("A/B pictures (rule off above rule on, seed 1): {} and {}", qa.display(), sa.display());
    }
    // Worker by worker, the QEMU run and the simulated run (rule on, seed 1) side by side.
    if let Some(on) = &sim_on {
        let text = format!(
            "{}\n{}",
            sched_sim::story::table(
                "QEMU (rule on, seed 1): each worker's creation, first run, block at the barrier, wakeup, next run (ms, CPU)",
                &sched_sim::story::stories(&log, qemu_worker)
            ),
            sched_sim::story::table(
                "the simulator (rule on, seed 1), the same",
                &sched_sim::story::stories(&on.log, sched_sim::picture::sim_worker)
            )
        );
        print!("\n{text}");
        write_file(&t.out.join("stories.txt"), &text);
    }
    // And the simulated run of the same machine and workload, rule on, as trace files.
    if let Some(on) = sim_on {
        let (j, s) = (t.out.join("sim-trace.json"), t.out.join("sim-timeline.svg"));
        if write_file(&j, on.json) && write_file(&s, on.svg) {
            println!("trace of one simulated run (rule on): {} , timeline: {}", j.display(), s.display());
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
}

/// The first `n` `key=value` numbers of a trace line's rest, all of them or none (a damaged
/// line is left out of the trace, not read as zeros), with the CPU (the first) one of the
/// machine's.
fn trace_fields(rest: &str, n: usize, cpus: usize) -> Option<Vec<u64>> {
    let f: Vec<u64> = rest
        .split_whitespace()
        .take(n)
        .map(|kv| kv.split_once('=')?.1.parse().ok())
        .collect::<Option<_>>()?;
    (f.len() == n && f[0] < cpus as u64).then_some(f)
}

/// Builds a trace from the kernel's `trace: switch cpu=C t=NS prev=P state=S next=N` lines
/// (pid = thread slot + 1, 0 = idle; state R/S/X as a byte) and its `trace: waking` lines.
pub(crate) fn qemu_trace(b: &Boot, cpus: usize) -> sched_sim::trace::TraceLog {
    let mut log = sched_sim::trace::TraceLog::new(cpus);
    for l in &b.lines {
        let woken = l.split("trace: waking ").nth(1);
        if let Some(rest) = woken.or_else(|| l.split("trace: new ").nth(1)) {
            // `waking cpu=C t=NS pid=P`: a wakeup of P onto C; `new ...`: P created there.
            if let Some([cpu, t, pid]) = trace_fields(rest, 3, cpus).as_deref() {
                let (cpu, t, pid) = (*cpu, *t, *pid);
                if pid > 0 {
                    let id = sched_core::TaskId::new(pid as u32 - 1, 0);
                    log.waking(t, cpu as usize, id, &format!("thread{}", pid - 1));
                }
            }
            continue;
        }
        if let Some(rest) = l.split("trace: balance-failed ").nth(1) {
            // `balance-failed cpu=C t=NS`: CPU C's balance attempt moved nothing.
            if let Some([cpu, t]) = trace_fields(rest, 2, cpus).as_deref() {
                log.balance_failed(*t, *cpu as usize);
            }
            continue;
        }
        let Some(rest) = l.split("trace: switch ").nth(1) else { continue };
        let Some(&[cpu, t, prev, state, next]) = trace_fields(rest, 5, cpus).as_deref() else { continue };
        let id = |pid: u64| (pid > 0).then(|| sched_core::TaskId::new(pid as u32 - 1, 0));
        let name = |pid: u64| (pid > 0).then(|| format!("thread{}", pid - 1));
        let st = match state as u8 {
            b'S' => Some(sched_core::TaskState::Blocked),
            b'X' => Some(sched_core::TaskState::Exiting),
            _ => Some(sched_core::TaskState::Runnable),
        };
        log.switch(t, cpu as usize, id(prev), name(prev), id(next), name(next), Some(st));
    }
    log
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace line is read whole or not at all: a field that is not a number, a line cut
    /// short, or a CPU past the machine leaves it out (a CPU past the machine once panicked
    /// the picture), and a good line is kept.
    #[test]
    fn damaged_trace_lines_are_left_out() {
        assert_eq!(trace_fields("cpu=1 t=500 prev=2 state=83 next=0", 5, 2), Some(vec![1, 500, 2, 83, 0]));
        assert_eq!(trace_fields("cpu=1 t=5x0 prev=2 state=83 next=0", 5, 2), None);
        assert_eq!(trace_fields("cpu=1 t=500 prev=2", 5, 2), None);
        assert_eq!(trace_fields("cpu=7 t=500 prev=2 state=83 next=0", 5, 2), None);
        let b = Boot::of_lines(&[
            "0.1 c0 trace: switch cpu=9 t=10 prev=0 state=82 next=1",
            "0.1 c0 trace: switch cpu=1 t=10 prev=0 state=82 next=1",
        ]);
        let log = qemu_trace(&b, 2);
        assert_eq!(log.switches.len(), 1);
        assert_eq!(log.switches[0].cpu, 1);
        let _ = log.svg("a picture of what was kept", 0, 10);
    }
}
