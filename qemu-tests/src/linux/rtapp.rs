//! rt-app's runs on Linux read into the same [`Activation`]s the simulator and the kernel
//! report, so that one definition ([`sched_workload::figures`]) makes every platform's
//! figures.
//!
//! rt-app 1.0 logs a line per phase iteration and thread (`idx perf run period start end
//! rel_st slack c_duration c_period wu_lat`, µs, start and end on the monotonic clock that
//! ftrace's `mono` clock also reads). What its log lacks comes from the trace:
//! - which phase: the task's phases in order, each its `loop` times (the log's order);
//! - the wake-to-run latency of an iteration without a timer sleep: from the thread's last
//!   `sched_waking` in the iteration to its next switch-in (rt-app's `wu_lat`, from the
//!   timer's deadline, where the iteration slept on its timer);
//! - the CPU an iteration ended on, the threads' CPU time and the run's length.

use std::collections::HashMap;

use sched_workload::figures::{per_task, TaskFigures};
use sched_workload::interp::Activation;
use sched_workload::Event as ProgramEvent;
use sched_workload::ProgramDef;

use super::ftrace::{self, Event, Line};
use super::Run;

/// What one rt-app run on Linux measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// rt-app's figures per task, in the program's order.
    pub tasks: Vec<TaskFigures>,
    /// From the first thread's creation to the last thread's last switch-out (ns).
    pub run_ns: u64,
    /// Migrations of the workload's threads (`sched_migrate_task`).
    pub migrations: u64,
}

/// One log line: (run, start, end, slack, wu_lat), µs.
fn log_line(l: &str) -> Option<[i64; 5]> {
    let f: Vec<i64> = l.split_whitespace().map(|w| w.parse().ok()).collect::<Option<_>>()?;
    (f.len() >= 11).then(|| [f[2], f[4], f[5], f[7], f[10]])
}

/// Per thread (rt-app's index: the order in which rt-app created them): its pid.
fn thread_pids(lines: &[Line]) -> Vec<u32> {
    lines
        .iter()
        .filter_map(|l| match &l.event {
            Event::WakeupNew { pid, .. } if l.by_comm == "rt-app" => Some(*pid),
            _ => None,
        })
        .collect()
}

/// Per pid: its on-CPU intervals (from, to, cpu), and its wakings.
#[derive(Default)]
struct History {
    on: Vec<(u64, u64, usize)>,
    wakings: Vec<u64>,
}

fn histories(lines: &[Line]) -> HashMap<u32, History> {
    let mut h: HashMap<u32, History> = HashMap::new();
    let mut since: HashMap<usize, (u32, u64)> = HashMap::new();
    for l in lines {
        match &l.event {
            Event::Switch { prev, next, .. } => {
                if let Some((pid, from)) = since.remove(&l.cpu) {
                    if pid == *prev && pid != 0 {
                        h.entry(pid).or_default().on.push((from, l.time, l.cpu));
                    }
                }
                since.insert(l.cpu, (*next, l.time));
            }
            Event::Waking { pid } => h.entry(*pid).or_default().wakings.push(l.time),
            _ => {}
        }
    }
    h
}

/// The figures of one rt-app `run` of `def` on a machine of `cpus` CPUs; `None` (with why)
/// if rt-app failed or its logs do not match the program.
pub fn measure(run: &Run, def: &ProgramDef, cpus: usize) -> Result<Measured, String> {
    if run.status != Some(0) {
        return Err(format!("rt-app exited with {:?}: {}", run.status, run.output.join(" / ")));
    }
    let lines = ftrace::parse(&run.trace);
    let pids = thread_pids(&lines);
    let hist = histories(&lines);
    let names: Vec<String> = def.tasks.iter().map(|t| t.name.clone()).collect();
    let mut acts = Vec::new();
    let mut cpu_ns = vec![0u64; def.tasks.len()];
    for (file, body) in &run.logs {
        // `rt-app-<task>-<idx>.log`
        let stem = file.trim_start_matches("rt-app-").trim_end_matches(".log");
        let (task_name, idx) = stem.rsplit_once('-').ok_or_else(|| format!("an rt-app log named {file}"))?;
        let task = names
            .iter()
            .position(|n| n == task_name)
            .ok_or_else(|| format!("{file}: no task {task_name}"))?;
        let thread: usize = idx.parse().map_err(|_| format!("an rt-app log named {file}"))?;
        let pid = *pids
            .get(thread)
            .ok_or_else(|| format!("{file}: thread {thread} has no creation in the trace"))?;
        let h = hist.get(&pid);
        cpu_ns[task] += h.map_or(0, |h| h.on.iter().map(|(a, b, _)| b - a).sum());
        let t = &def.tasks[task];
        // The phases in the order rt-app runs them: each its loop times, round and round.
        let order =
            t.phases.iter().enumerate().flat_map(|(i, p)| std::iter::repeat_n(i, p.loops.max(1) as usize));
        let order: Vec<usize> = order.collect();
        for (k, [run_us, start, end, slack, wu_lat]) in body.iter().filter_map(|l| log_line(l)).enumerate() {
            let phase = order[k % order.len().max(1)];
            let timer = t.phases[phase].events.iter().any(|e| matches!(e, ProgramEvent::Timer { .. }));
            let (start, end) = (start.max(0) as u64 * 1000, end.max(0) as u64 * 1000);
            let slept_on_timer = timer && slack >= 0;
            let wake = if slept_on_timer {
                Some(wu_lat.max(0) as u64 * 1000)
            } else {
                // (Both lists are in time order: binary searches keep a long run linear.)
                h.and_then(|h| {
                    let w = *h.wakings[..h.wakings.partition_point(|&w| w <= end)]
                        .last()
                        .filter(|&&w| w > start)?;
                    let on = h.on.get(h.on.partition_point(|(from, _, _)| *from < w))?;
                    Some(on.0 - w)
                })
            };
            let cpu = h
                .and_then(|h| h.on[..h.on.partition_point(|(from, _, _)| *from <= end)].last())
                .map_or(0, |(_, _, c)| *c);
            acts.push(Activation {
                thread: thread as u16,
                task: task as u16,
                phase: phase as u16,
                start,
                end,
                run_ns: run_us.max(0) as u64 * 1000,
                slack_ns: timer.then_some(slack * 1000),
                wake_latency_ns: wake,
                cpu: cpu as u16,
            });
        }
    }
    let first = lines.iter().find(|l| matches!(&l.event, Event::WakeupNew { .. } if l.by_comm == "rt-app"));
    let last = pids.iter().filter_map(|p| hist.get(p)?.on.last().map(|o| o.1)).max();
    let run_ns = match (first, last) {
        (Some(f), Some(l)) if l > f.time => l - f.time,
        _ => return Err("the trace shows no rt-app thread running".into()),
    };
    let migrations =
        lines.iter().filter(|l| matches!(&l.event, Event::Migrate { pid, .. } if pids.contains(pid))).count()
            as u64;
    Ok(Measured { tasks: per_task(&names, &acts, &cpu_ns, run_ns, cpus), run_ns, migrations })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One thread, one phase with a timer: a log line that slept (its wu_lat is the wake
    /// latency) and one that missed (no sleep: the trace's waking, none here).
    #[test]
    fn log_lines_become_activations() {
        let def = sched_workload::rtapp::lower(
            r#"{"global": {"duration": 1, "calibration": 100}, "tasks": {"a": {"loop": -1, "phases": {"p": {"runtime": 10, "timer": {"ref": "unique", "period": 100}}}}}}"#,
        )
        .unwrap();
        let trace = [
            "  rt-app-50 [000] d.... 1.000000: sched_wakeup_new: comm=rt-app pid=51 prio=120 target_cpu=001",
            "  <idle>-0 [001] d.... 1.000010: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=a next_pid=51 next_prio=120",
            "  a-51 [001] d.... 1.000100: sched_switch: prev_comm=a prev_pid=51 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120",
        ];
        let run = Run {
            output: vec![],
            logs: vec![(
                "rt-app-a-0.log".into(),
                vec![
                    "#idx perf run period start end rel_st slack c_duration c_period wu_lat".into(),
                    "   0  10  10  100  1000010  1000110  0  80  10  100  7".into(),
                    "   0  10  150  150  1000110  1000260  100  -50  10  100  0".into(),
                ],
            )],
            trace: trace.iter().map(|s| s.to_string()).collect(),
            status: Some(0),
        };
        let m = measure(&run, &def, 2).unwrap();
        let a = &m.tasks[0];
        assert_eq!(a.activations, 2);
        assert_eq!((a.slack_us.count, a.misses), (2, 1));
        assert_eq!(a.wake_us.count, 1, "the missed timer did not sleep");
        assert_eq!(a.wake_us.max, 7.0);
        assert_eq!(m.run_ns, 100_000);
        assert_eq!(a.cpu_share_pct, 45.0, "90 µs on CPU over 100 µs of 2 CPUs");
        assert_eq!(a.last_phase_cpus, 0b10);
    }
}
